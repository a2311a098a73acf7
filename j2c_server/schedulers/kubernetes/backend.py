"""The Kubernetes backend: one batch/v1 Job per j2c job, through the API server with httpx.

- submit: POST the Job from :func:`render_job`; a 409 adopts the existing Job when its
  ``j2c.io/key`` annotation is this request's key (a retried create), and refuses otherwise.
- status: the Job's conditions and its pod (see :mod:`.status`: a pod is the Job's only when it
  names the Job's uid as its controller; the first one stands for it until the Job controller
  replaced it, so a pod another user plants beside it is never read).
- logs: ``pods/{pod}/log?follow=true&timestamps=true``, reconnecting after a dropped stream from
  the cursor (see :mod:`.logs`); ends when the container has terminated and its log drained.
- credentials: the job's env takes them by reference from a Secret of its own (named as the
  Job, created first, then owned by the Job so that it goes with it), never as values in the Job.
- cancel: annotate the Job as cancelled, then delete it with ``propagationPolicy: Background``
  (the pod gets SIGTERM and its grace period). A Job that is gone after a cancel reads as
  cancelled, anything else that vanished as lost.
- multi-node (``resources.nodes > 1``): an Indexed Job plus a headless Service for its pods'
  names (see :mod:`.spec`); status, logs (tagged with their rank) and the exit code read
  every rank's pod (:mod:`.ranks`); cancel deletes the Job, its pods and the Service.
- sweeps (``submit_array``): ONE Indexed Job of all the variants, ``max_parallel`` at a time;
  each variant's handle is its index (``<job>/<index>``), whose status, log, exit code and cancel
  are that index's pod's; cancelling one index deletes its pod, and the whole Job goes once only
  cancelled indexes are left (why: :mod:`.array`; the requests: :mod:`.indexed`).
  The Job and its pods are read at most twice a second for all its variants.

The connection (kubeconfig or service account, :mod:`.auth`) is resolved on first use, in a
worker thread, so constructing a scheduler never touches the disk or the network.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from j2c_server.config import J2CSettings
from j2c_server.core.errors import Conflict, J2CError, SchedulerError
from j2c_server.schedulers.base import JobSpec, LogLine, SchedulerBase, SchedulerState, no_image
from j2c_server.schedulers.kubernetes.array import (
    INDEX_ENV,
    per_index_limit_kept,
    render_array,
    task_handle_id,
)
from j2c_server.schedulers.kubernetes.auth import (
    SERVICE_ACCOUNT_DIR,
    KubeConnection,
    load_connection,
)
from j2c_server.schedulers.kubernetes.errors import api_error, transport_error
from j2c_server.schedulers.kubernetes.handles import (
    BACKGROUND,
    JSON_MERGE_PATCH,
    index_of,
    job_name_of,
    jobs_url,
    lost,
    namespace_of,
    nodes_of,
    pods_url,
    secrets_url,
    services_url,
)
from j2c_server.schedulers.kubernetes.indexed import IndexedJobs, Snapshot
from j2c_server.schedulers.kubernetes.logs import LogCursor, LogReader
from j2c_server.schedulers.kubernetes.ranks import first_failed_code, rank_pods, ranked_state
from j2c_server.schedulers.kubernetes.settings import KubernetesSettings
from j2c_server.schedulers.kubernetes.spec import (
    ANNOTATION_CANCELLED,
    ANNOTATION_KEY,
    CONTAINER_NAME,
    render_job,
    render_secret,
    render_service,
)
from j2c_server.schedulers.kubernetes.status import (
    CONTROLLER_UID_LABEL,
    container_started,
    container_terminated,
    current_pod,
    exit_code,
    job_finished,
    job_state,
    owned_pods,
)
from j2c_server.schedulers.multinode import follow_ranks, parse_rank_cursor
from j2c_server.wire.api import Capabilities, JobHandle, JobResults, JobStatus

# A follow stream that stays silent this long is re-opened from its cursor: a half-dead
# connection must not hang the watcher forever, and a reconnect costs nothing.
_FOLLOW_IDLE_S = 300.0


class KubernetesScheduler(SchedulerBase):
    name = "kubernetes"
    settings_model = KubernetesSettings
    capabilities = Capabilities(
        gpus=True,
        gpu_types=True,
        cpus=True,
        memory=True,
        time_limit=True,
        multi_node=True,
        arrays=True,
    )

    @classmethod
    async def image_problem(cls, settings: J2CSettings, image: str | None) -> J2CError | None:
        """Every pod runs an image: none given and none configured cannot start."""
        return None if image or settings.lab_image() else no_image()

    remote = True
    array_index_env = INDEX_ENV

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
        self._indexed = IndexedJobs(self, self._kube.poll_interval_s)  # sweeps' variants

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
            raise transport_error(exc, conn) from None
        if response.status_code >= 400 and response.status_code not in allow:
            raise api_error(response, conn)
        return response

    # ------------------------------------------------------------------ the protocol

    async def submit(self, spec: JobSpec) -> JobHandle:
        _, conn = await self._api()
        manifest = render_job(spec, self._settings, namespace=conn.namespace)
        job = await self._create(spec, manifest, conn.namespace)
        name = str(job["metadata"]["name"])
        data: dict[str, Any] = {"namespace": conn.namespace, "uid": job["metadata"].get("uid")}
        if spec.resources.nodes > 1:
            service = render_service(
                spec, self._settings, owner_uid=job["metadata"]["uid"], namespace=conn.namespace
            )
            # A retried submit finds its Service there already (409): the same one.
            await self._request("POST", services_url(conn.namespace), json=service, allow=(409,))
            data["nodes"] = spec.resources.nodes
        return JobHandle(scheduler=self.name, id=name, data=data)

    async def submit_array(
        self, spec: JobSpec, size: int, max_parallel: int | None
    ) -> list[JobHandle]:
        """ONE Indexed Job of ``size`` indexes running ``spec`` (whose command picks its row by
        :data:`~.array.INDEX_ENV`), ``max_parallel`` at a time; one handle per index,
        ``<job>/<index>``, in index order. A retried submit adopts the Job, like ``submit``."""
        _, conn = await self._api()
        manifest = render_array(spec, self._settings, size, max_parallel, namespace=conn.namespace)
        job = await self._create(spec, manifest, conn.namespace)
        name, uid = str(job["metadata"]["name"]), job["metadata"].get("uid")
        if not per_index_limit_kept(job):
            # Without it every variant's failure would count against them all: never run so.
            await self._request("DELETE", f"{jobs_url(conn.namespace)}/{name}", json=BACKGROUND)
            raise SchedulerError(
                f"the Kubernetes API server dropped backoffLimitPerIndex from the sweep's Job "
                f"{name} (it needs Kubernetes 1.29 or newer); the Job was deleted",
                hint="upgrade the cluster, or enable the JobBackoffLimitPerIndex feature gate "
                "(Kubernetes 1.28)",
            )
        data = {"namespace": conn.namespace, "uid": uid, "array": name}
        return [
            JobHandle(scheduler=self.name, id=task_handle_id(name, i), data={**data, "index": i})
            for i in range(size)
        ]

    async def _create(
        self, spec: JobSpec, manifest: dict[str, Any], namespace: str
    ) -> dict[str, Any]:
        """POST ``manifest``; a 409 adopts the Job this request's key made before. The job's
        Secret (its credentials, by reference) first, then owned by the Job: deleted with it."""
        name = manifest["metadata"]["name"]
        secret = render_secret(spec, self._settings, namespace=namespace)
        if secret is not None:
            await self._put_secret(namespace, secret)
        job = await self._create_job(spec, manifest, namespace)
        if secret is not None:
            owner = {"apiVersion": "batch/v1", "kind": "Job", "name": name}
            patch = {"metadata": {"ownerReferences": [{**owner, "uid": job["metadata"]["uid"]}]}}
            headers = {"Content-Type": JSON_MERGE_PATCH}
            await self._request(
                "PATCH", f"{secrets_url(namespace)}/{name}", json=patch, headers=headers
            )
        return job

    async def _put_secret(self, namespace: str, secret: dict[str, Any]) -> None:
        """Create the job's Secret, or (a retried submit) replace its values: no read of it is
        needed, so the identity needs no get or list on Secrets."""
        name = secret["metadata"]["name"]
        response = await self._request("POST", secrets_url(namespace), json=secret, allow=(409,))
        if response.status_code == 409:
            await self._request("PUT", f"{secrets_url(namespace)}/{name}", json=secret)

    async def _create_job(
        self, spec: JobSpec, manifest: dict[str, Any], namespace: str
    ) -> dict[str, Any]:
        name = manifest["metadata"]["name"]
        response = await self._request("POST", jobs_url(namespace), json=manifest, allow=(409,))
        if response.status_code != 409:
            created: dict[str, Any] = response.json()
            return created
        existing = await self._get_job(namespace, name)
        annotations = (existing or {}).get("metadata", {}).get("annotations") or {}
        if existing is None or annotations.get(ANNOTATION_KEY) != spec.key:
            raise Conflict(
                f"a Job named {name} already exists in namespace {namespace} and was not "
                "created for this request",
                field="key",
                hint="delete that Job, or submit with a different request",
            )
        return existing

    async def status(self, handle: JobHandle) -> SchedulerState:
        index = index_of(handle)
        if index is not None:
            return await self._indexed.status(handle, index)
        job, pods = await self._job_and_pods(handle)
        if job is None:
            if self._was_cancelled(handle):
                return SchedulerState(status=JobStatus.cancelled, message="cancelled")
            return lost(handle)
        nodes = nodes_of(handle)
        return ranked_state(job, pods, nodes) if nodes > 1 else job_state(job, pods)

    def follow_logs(self, handle: JobHandle, cursor: str | None = None) -> AsyncIterator[LogLine]:
        nodes = nodes_of(handle)
        if nodes == 1:
            return self._follow_pod(handle, cursor, index_of(handle))
        for inner in parse_rank_cursor(cursor, nodes).values():
            if inner:
                LogCursor.parse(inner)  # a bad cursor fails here, not at the first line
        return follow_ranks(lambda rank, at: self._follow_pod(handle, at, rank), nodes, cursor)

    async def _follow_pod(
        self, handle: JobHandle, cursor: str | None, rank: int | None
    ) -> AsyncIterator[LogLine]:
        """One pod's lines (the newest pod's, or rank or index ``rank``'s) from ``cursor`` to
        the end."""
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
        index = index_of(handle)
        if index is not None:
            return await self._indexed.cancel(handle, index)
        namespace = namespace_of(handle)
        job = await self._get_job(namespace, handle.id)
        if job is None or job_finished(job) or job["metadata"].get("uid") != handle.data.get("uid"):
            return
        handle.data["cancelled"] = True
        await self._delete_job(namespace, handle.id, str(job["metadata"]["uid"]))
        if nodes_of(handle) > 1:
            # Owned by the Job, so the garbage collector would take it too; now is sooner.
            service = f"{services_url(namespace)}/{handle.id}"
            await self._request("DELETE", service, json=BACKGROUND, allow=(404,))

    async def results(self, handle: JobHandle) -> JobResults:
        index = index_of(handle)
        if index is not None:
            return JobResults(exit_code=await self._indexed.exit_code(handle, index))
        job, pods = await self._job_and_pods(handle)
        if nodes_of(handle) > 1:
            failed = first_failed_code(pods)
            return JobResults(exit_code=failed[1] if failed else (0 if pods else None))
        code = exit_code(current_pod(job, pods))
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
        response = await self._request("GET", f"{jobs_url(namespace)}/{name}", allow=(404,))
        if response.status_code == 404:
            return None
        job: dict[str, Any] = response.json()
        return job

    async def _job_and_pods(self, handle: JobHandle) -> Snapshot:
        namespace = namespace_of(handle)
        job = await self._get_job(namespace, job_name_of(handle))
        uid = handle.data.get("uid")
        if job is None or (uid and job["metadata"].get("uid") != uid):
            return None, []
        selector = f"{CONTROLLER_UID_LABEL}={job['metadata']['uid']}"
        response = await self._request(
            "GET", pods_url(namespace), params={"labelSelector": selector}
        )
        # Labels are anyone's to write: the Job's own pods also name it as their controller.
        return job, owned_pods(job, response.json().get("items") or [])

    async def _started_pod(self, handle: JobHandle, rank: int | None) -> dict[str, Any] | None:
        """The pod whose log to read (of rank or index ``rank``, if given), once its container
        started; None if none ever will."""
        index = index_of(handle)
        while True:
            if index is None:
                job, pods = await self._job_and_pods(handle)
                over = job is None or job_finished(job)
            else:
                job, pods = await self._indexed.read(handle)
                over = job is None or self._indexed.state_of(job, pods, index).status.terminal
            pod = current_pod(job, pods if rank is None else rank_pods(pods, rank))
            if pod is not None and container_started(pod):
                return pod
            if over:
                return None
            await asyncio.sleep(self._kube.poll_interval_s)

    async def _delete_job(self, namespace: str, name: str, uid: str) -> None:
        """Mark the Job cancelled, then delete it in the background (its pods get SIGTERM)."""
        url = f"{jobs_url(namespace)}/{name}"
        patch = {"metadata": {"annotations": {ANNOTATION_CANCELLED: "true"}}}
        headers = {"Content-Type": JSON_MERGE_PATCH}
        await self._request("PATCH", url, json=patch, headers=headers, allow=(404,))
        self._cancelled.add(uid)
        await self._request("DELETE", url, json=BACKGROUND, allow=(404,))

    async def _read_log(
        self, handle: JobHandle, reader: LogReader, *, follow: bool
    ) -> AsyncIterator[LogLine]:
        """Lines of one log request after the reader's cursor. A dropped stream just ends;
        ``reader.ended`` tells the two apart."""
        client, conn = await self._api()
        namespace = namespace_of(handle)
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
                    raise api_error(response, conn)
                async for chunk in response.aiter_bytes():
                    for line in reader.feed(chunk):
                        yield line
        except httpx.ConnectError as exc:
            raise transport_error(exc, conn) from None
        except httpx.TransportError:
            return  # dropped mid-stream: the caller reconnects from the cursor
        # A follow stream's unterminated last line is left for the final plain read.
        lines = reader.finish() if not follow else []
        reader.ended = True
        for line in lines:
            yield line
