"""The Kubernetes backend: one batch/v1 Job per j2c job, through the API server with httpx.

- submit: POST the Job from :func:`render_job`; a 409 adopts the existing Job when its
  ``j2c.io/key`` annotation is this request's key (a retried create), and refuses otherwise.
- status: the Job's conditions and its newest pod (see :mod:`.kube_status`).
- logs: ``pods/{pod}/log?follow=true&timestamps=true``, reconnecting after a dropped stream from
  the cursor (see :mod:`.kube_logs`); ends when the container has terminated and its log drained.
- cancel: annotate the Job as cancelled, then delete it with ``propagationPolicy: Background``
  (the pod gets SIGTERM and its grace period). A Job that is gone after a cancel reads as
  cancelled, anything else that vanished as lost.
- multi-node (``resources.nodes > 1``): an Indexed Job plus a headless Service for its pods'
  names (see :mod:`.kube_spec`); status, logs (tagged with their rank) and the exit code read
  every rank's pod (:mod:`.kube_ranks`); cancel deletes the Job, its pods and the Service.

The connection (kubeconfig or service account, :mod:`.kube_auth`) is resolved on first use, in a
worker thread, so constructing a scheduler never touches the disk or the network.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from j2c_server.config import J2CSettings
from j2c_server.core.errors import Conflict, InvalidInput, SchedulerError, SchedulerUnavailable
from j2c_server.schedulers.base import JobSpec, LogLine, SchedulerBase, SchedulerState
from j2c_server.schedulers.kube_auth import SERVICE_ACCOUNT_DIR, KubeConnection, load_connection
from j2c_server.schedulers.kube_logs import LogCursor, LogReader
from j2c_server.schedulers.kube_ranks import first_failed_code, rank_pods, ranked_state
from j2c_server.schedulers.kube_settings import KubernetesSettings
from j2c_server.schedulers.kube_spec import (
    ANNOTATION_CANCELLED,
    ANNOTATION_KEY,
    CONTAINER_NAME,
    render_job,
    render_service,
)
from j2c_server.schedulers.kube_status import (
    container_started,
    container_terminated,
    exit_code,
    job_finished,
    job_state,
    newest_pod,
)
from j2c_server.schedulers.multinode import follow_ranks, parse_rank_cursor
from j2c_server.wire.api import Capabilities, JobHandle, JobResults, JobStatus

# A follow stream that stays silent this long is re-opened from its cursor: a half-dead
# connection must not hang the watcher forever, and a reconnect costs nothing.
_FOLLOW_IDLE_S = 300.0
_JSON_MERGE_PATCH = "application/merge-patch+json"


class KubernetesScheduler(SchedulerBase):
    name = "kubernetes"
    settings_model = KubernetesSettings
    capabilities = Capabilities(gpus=True, gpu_types=True, multi_node=True)
    remote = True

    @classmethod
    def native_spec(cls, spec: JobSpec, settings: J2CSettings) -> dict[str, Any] | None:
        """The batch/v1 Job that submitting ``spec`` creates (with its Service: a List)."""
        job = render_job(spec, settings)
        if spec.resources.nodes == 1:
            return job
        service = render_service(spec, settings, owner_uid="<the Job's uid>")
        return {"apiVersion": "v1", "kind": "List", "items": [job, service]}

    def __init__(
        self,
        settings: J2CSettings,
        *,
        environ: Mapping[str, str] | None = None,
        service_account_dir: Path = SERVICE_ACCOUNT_DIR,
    ) -> None:
        self._settings = settings
        self._kube = settings.scheduler.section("kubernetes", KubernetesSettings)
        self._environ = dict(os.environ if environ is None else environ)
        self._sa_dir = service_account_dir
        self._conn: KubeConnection | None = None
        self._client: httpx.AsyncClient | None = None
        self._connect_lock = asyncio.Lock()
        self._cancelled: set[str] = set()  # uids of Jobs this process deleted

    async def __aenter__(self) -> KubernetesScheduler:
        return self

    async def __aexit__(
        self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # ------------------------------------------------------------------ connection

    async def _api(self) -> tuple[httpx.AsyncClient, KubeConnection]:
        async with self._connect_lock:
            if self._client is None or self._conn is None:
                self._conn = await asyncio.to_thread(
                    load_connection,
                    kubeconfig=self._kube.kubeconfig,
                    context=self._kube.context,
                    namespace=self._kube.namespace,
                    environ=self._environ,
                    service_account_dir=self._sa_dir,
                )
                self._client = self._conn.client()
            return self._client, self._conn

    async def _request(
        self, method: str, url: str, *, allow: tuple[int, ...] = (), **kwargs: Any
    ) -> httpx.Response:
        client, conn = await self._api()
        try:
            response = await client.request(method, url, **kwargs)
        except httpx.TransportError as exc:
            raise _transport_error(exc, conn) from None
        if response.status_code >= 400 and response.status_code not in allow:
            raise _api_error(response, conn)
        return response

    # ------------------------------------------------------------------ the protocol

    async def submit(self, spec: JobSpec) -> JobHandle:
        _, conn = await self._api()
        manifest = render_job(spec, self._settings, namespace=conn.namespace)
        name = manifest["metadata"]["name"]
        url = _jobs_url(conn.namespace)
        response = await self._request("POST", url, json=manifest, allow=(409,))
        if response.status_code == 409:
            existing = await self._get_job(conn.namespace, name)
            annotations = (existing or {}).get("metadata", {}).get("annotations") or {}
            if existing is None or annotations.get(ANNOTATION_KEY) != spec.key:
                raise Conflict(
                    f"a Job named {name} already exists in namespace {conn.namespace} and was not "
                    "created for this request",
                    field="key",
                    hint="delete that Job, or submit with a different request",
                )
            job = existing
        else:
            job = response.json()
        data: dict[str, Any] = {"namespace": conn.namespace, "uid": job["metadata"].get("uid")}
        if spec.resources.nodes > 1:
            service = render_service(
                spec, self._settings, owner_uid=job["metadata"]["uid"], namespace=conn.namespace
            )
            # A retried submit finds its Service there already (409): the same one.
            await self._request("POST", _services_url(conn.namespace), json=service, allow=(409,))
            data["nodes"] = spec.resources.nodes
        return JobHandle(scheduler=self.name, id=name, data=data)

    async def status(self, handle: JobHandle) -> SchedulerState:
        job, pods = await self._job_and_pods(handle)
        if job is None:
            if self._was_cancelled(handle):
                return SchedulerState(status=JobStatus.cancelled, message="cancelled")
            return SchedulerState(
                status=JobStatus.lost,
                message=f"Job {handle.id} no longer exists (deleted, or removed after "
                "ttlSecondsAfterFinished)",
            )
        nodes = _nodes(handle)
        return ranked_state(job, pods, nodes) if nodes > 1 else job_state(job, pods)

    def follow_logs(self, handle: JobHandle, cursor: str | None = None) -> AsyncIterator[LogLine]:
        nodes = _nodes(handle)
        if nodes == 1:
            return self._follow_pod(handle, cursor, None)
        for inner in parse_rank_cursor(cursor, nodes).values():
            if inner:
                LogCursor.parse(inner)  # a bad cursor fails here, not at the first line
        return follow_ranks(lambda rank, at: self._follow_pod(handle, at, rank), nodes, cursor)

    async def _follow_pod(
        self, handle: JobHandle, cursor: str | None, rank: int | None
    ) -> AsyncIterator[LogLine]:
        """One pod's lines (the newest pod's, or rank ``rank``'s) from ``cursor`` to the end."""
        position = LogCursor.parse(cursor) if cursor else None
        while True:
            pod = await self._started_pod(handle, rank)
            if pod is None:
                return
            pod_name = pod["metadata"]["name"]
            if position is None or position.pod != pod_name:
                position = LogCursor(pod_name)
            # Once the container has terminated, one plain read returns everything after the
            # cursor; before that, follow, and re-check the pod whenever the stream ends.
            finished = container_terminated(pod)
            reader = LogReader(position)
            received = False
            async for line in self._read_log(handle, reader, follow=not finished):
                received = True
                yield line
            position = reader.cursor
            if finished and reader.ended:
                return
            if not received:
                await asyncio.sleep(self._kube.poll_interval_s)

    async def cancel(self, handle: JobHandle) -> None:
        namespace = _namespace(handle)
        job = await self._get_job(namespace, handle.id)
        if job is None or job_finished(job) or job["metadata"].get("uid") != handle.data.get("uid"):
            return
        url = f"{_jobs_url(namespace)}/{handle.id}"
        patch = {"metadata": {"annotations": {ANNOTATION_CANCELLED: "true"}}}
        headers = {"Content-Type": _JSON_MERGE_PATCH}
        await self._request("PATCH", url, json=patch, headers=headers, allow=(404,))
        self._cancelled.add(str(job["metadata"]["uid"]))
        handle.data["cancelled"] = True
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        await self._request("DELETE", url, json=body, allow=(404,))
        if _nodes(handle) > 1:
            # Owned by the Job, so the garbage collector would take it too; now is sooner.
            service = f"{_services_url(namespace)}/{handle.id}"
            await self._request("DELETE", service, json=body, allow=(404,))

    async def results(self, handle: JobHandle) -> JobResults:
        job, pods = await self._job_and_pods(handle)
        if _nodes(handle) > 1:
            failed = first_failed_code(pods)
            return JobResults(exit_code=failed[1] if failed else (0 if pods else None))
        code = exit_code(newest_pod(pods))
        if code is None and job is not None:
            code = job_state(job, pods).exit_code
        return JobResults(exit_code=code)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    # ------------------------------------------------------------------ helpers

    def _was_cancelled(self, handle: JobHandle) -> bool:
        return bool(handle.data.get("cancelled")) or handle.data.get("uid") in self._cancelled

    async def _get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        response = await self._request("GET", f"{_jobs_url(namespace)}/{name}", allow=(404,))
        if response.status_code == 404:
            return None
        job: dict[str, Any] = response.json()
        return job

    async def _job_and_pods(
        self, handle: JobHandle
    ) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        namespace = _namespace(handle)
        job = await self._get_job(namespace, handle.id)
        uid = handle.data.get("uid")
        if job is None or (uid and job["metadata"].get("uid") != uid):
            return None, []
        selector = f"controller-uid={job['metadata']['uid']}"
        response = await self._request(
            "GET", f"/api/v1/namespaces/{namespace}/pods", params={"labelSelector": selector}
        )
        pods: list[dict[str, Any]] = response.json().get("items") or []
        return job, pods

    async def _started_pod(self, handle: JobHandle, rank: int | None) -> dict[str, Any] | None:
        """The pod whose log to read (of rank ``rank``, if given), once its container started;
        None if none ever will."""
        while True:
            job, pods = await self._job_and_pods(handle)
            pod = newest_pod(pods if rank is None else rank_pods(pods, rank))
            if pod is not None and container_started(pod):
                return pod
            if job is None or job_finished(job):
                return None
            await asyncio.sleep(self._kube.poll_interval_s)

    async def _read_log(
        self, handle: JobHandle, reader: LogReader, *, follow: bool
    ) -> AsyncIterator[LogLine]:
        """Lines of one log request after the reader's cursor. A dropped stream just ends;
        ``reader.ended`` tells the two apart."""
        client, conn = await self._api()
        namespace = _namespace(handle)
        params = {"container": CONTAINER_NAME, "timestamps": "true"}
        if follow:
            params["follow"] = "true"
        since = reader.cursor.since_time()
        if since:
            params["sinceTime"] = since
        url = f"/api/v1/namespaces/{namespace}/pods/{reader.cursor.pod}/log"
        timeout = httpx.Timeout(30.0, connect=10.0, read=_FOLLOW_IDLE_S if follow else 60.0)
        try:
            async with client.stream("GET", url, params=params, timeout=timeout) as response:
                # 400: the container is not running (yet, or any more); 404: the pod is gone.
                # Nothing to read here; the caller re-reads the pod and decides.
                if response.status_code in (400, 404):
                    reader.ended = True
                    return
                if response.status_code >= 400:
                    await response.aread()
                    raise _api_error(response, conn)
                async for chunk in response.aiter_bytes():
                    for line in reader.feed(chunk):
                        yield line
        except httpx.ConnectError as exc:
            raise _transport_error(exc, conn) from None
        except httpx.TransportError:
            return  # dropped mid-stream: the caller reconnects from the cursor
        # A follow stream's unterminated last line is left for the final plain read.
        lines = reader.finish() if not follow else []
        reader.ended = True
        for line in lines:
            yield line


def _namespace(handle: JobHandle) -> str:
    namespace = handle.data.get("namespace")
    if not isinstance(namespace, str) or not namespace:
        raise InvalidInput("handle: a Kubernetes job handle needs its namespace", field="handle")
    return namespace


def _jobs_url(namespace: str) -> str:
    return f"/apis/batch/v1/namespaces/{namespace}/jobs"


def _services_url(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/services"


def _nodes(handle: JobHandle) -> int:
    return int(handle.data.get("nodes", 1))


def _transport_error(exc: httpx.TransportError, conn: KubeConnection) -> SchedulerError:
    """Unreachable is worth retrying; a certificate that does not verify is not."""
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, ssl.SSLCertVerificationError):
        cause = cause.__cause__ or cause.__context__
    if cause is not None:
        return SchedulerError(
            f"the Kubernetes API server at {conn.server} has a certificate that does not "
            f"verify: {cause}",
            hint=f"check the certificate authority of {conn.source}",
        )
    return SchedulerUnavailable(
        f"cannot reach the Kubernetes API server at {conn.server}: {exc!s}",
        hint=f"check the server of {conn.source} and the network",
    )


def _api_error(response: httpx.Response, conn: KubeConnection) -> SchedulerError:
    """A Kubernetes ``Status`` reply as an error that says what to check (never a token)."""
    try:
        body = response.json()
        message = str(body.get("message") or response.reason_phrase)
    except ValueError:
        message = response.reason_phrase
    code = response.status_code
    if code == 401:
        return SchedulerError(
            f"the Kubernetes API server rejected the credentials of {conn.source} "
            "(401 Unauthorized)",
            hint="the token or client certificate is wrong or expired; renew it",
        )
    if code == 403:
        return SchedulerError(
            f"Kubernetes refused the request (403 Forbidden): {message}",
            hint=f"grant create/get/patch/delete on jobs and get/list on pods and pods/log in "
            f"namespace {conn.namespace}",
        )
    if code == 422:
        return SchedulerError(f"Kubernetes rejected the Job (422 Invalid): {message}")
    if code == 429 or code >= 500:
        return SchedulerUnavailable(f"the Kubernetes API server is unavailable ({code}): {message}")
    return SchedulerError(f"Kubernetes answered {code}: {message}")
