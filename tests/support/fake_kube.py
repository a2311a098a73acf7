"""A fake Kubernetes API server, because no real one can run on this machine.

There is no container runtime here and no kube-apiserver on PyPI or in Debian, so the Kubernetes
backend is tested against this stand-in. It is a real HTTPS server (tornado, 127.0.0.1, its own
thread and event loop) that speaks the real batch/v1 and core/v1 JSON for the endpoints j2c uses:

- ``POST/GET/PATCH/DELETE /apis/batch/v1/namespaces/{ns}/jobs[/{name}]`` (409 on a duplicate
  create, 422 on an invalid Job, merge-patch with the ``resourceVersion`` precondition (409 when
  it is stale), ``DeleteOptions.propagationPolicy`` recorded);
- ``GET /api/v1/namespaces/{ns}/pods?labelSelector=...``, ``GET/DELETE .../pods/{name}``; ``POST``
  of a pod as any user may make one (fields as given: labels and ownerReferences included, as
  Kubernetes takes them without an admission policy);
- ``POST/GET/DELETE /api/v1/namespaces/{ns}/services[/{name}]``, garbage-collected with their
  owner Job;
- ``POST/PUT/PATCH/GET /api/v1/namespaces/{ns}/secrets[/{name}]`` (``stringData`` kept as given,
  merge-patch of ``metadata``), garbage-collected with their owner Job;
- Indexed Jobs (``completionMode: Indexed``): one pod per index, with the index annotation and
  label and the hostname ``<job>-<index>``, at most ``parallelism`` at once (the next index's
  pod is created when one ends, lowest index first). A multi-node Job (podFailurePolicy
  FailJob): a failed pod fails the Job and the controller removes the other pods. A sweep's Job
  (``backoffLimitPerIndex: 0``): each index ends on its own in ``completedIndexes`` /
  ``failedIndexes``, the Job is Complete once all succeeded, else Failed (``FailedIndexes``)
  once all ended; a pod deleted before it ended fails its index (it is removed at once: the
  fake has no grace period, and no container that a SIGTERM could reach);
- ``drop_job_fields``: Job spec fields the fake drops on create, as an older API server drops
  fields it does not know (``backoffLimitPerIndex`` before Kubernetes 1.29);
- ``POST .../pods/{name}/eviction`` (policy/v1 ``Eviction``, what ``kubectl drain`` sends): the
  pod gets the ``DisruptionTarget`` condition (``EvictionByEvictionAPI``), its container ends
  on the SIGTERM (143), and the Job controller applies the Job's ``podFailurePolicy`` as the
  real one does (first matching rule: ``FailJob`` fails the Job with reason
  ``PodFailurePolicy`` and a message naming the condition and the rule, ``Ignore`` makes a new
  pod without counting the failure); without a matching rule ``backoffLimit: 0`` fails the Job
  (``BackoffLimitExceeded``); then the pod is deleted;
- ``GET .../pods/{name}/log`` with ``follow``, ``timestamps``, ``sinceTime`` (applied at whole
  seconds, the coarsest a real server does) and ``container``; a test can make it drop the
  connection mid-stream, in the middle of a line;
- authentication by bearer token or verified client certificate (CN = user), 401 otherwise.

Its Job controller and kubelet are the test: methods such as :meth:`FakeKube.unschedulable`,
:meth:`FakeKube.start`, :meth:`FakeKube.log` and :meth:`FakeKube.finish` move the pod through the
states a real cluster reports, with the real field names and reasons. Loaded as a pytest plugin
by ``tests/conftest.py``; :func:`fake_kube` gives each test a fresh server.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as dt
import ipaddress
import json
import re
import secrets
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from tornado import httpserver, locks, netutil, web
from tornado.http1connection import HTTP1Connection
from tornado.ioloop import IOLoop

T = TypeVar("T")
GOOD_TOKEN = "token-for-tests"
CLIENT_USER = "alice"
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")
INDEX_KEY = "batch.kubernetes.io/job-completion-index"  # the pod's annotation and label


# --------------------------------------------------------------------------- TLS material


@dataclass(frozen=True)
class FakeTLS:
    """PEM bytes of a throw-away CA, the server's certificate and a client certificate."""

    ca: bytes
    server_cert: bytes
    server_key: bytes
    client_cert: bytes
    client_key: bytes

    def write(self, directory: Path) -> dict[str, Path]:
        directory.mkdir(parents=True, exist_ok=True)
        paths = {}
        for name in ("ca", "server_cert", "server_key", "client_cert", "client_key"):
            path = directory / f"{name}.pem"
            path.write_bytes(getattr(self, name))
            paths[name] = path
        return paths


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _issue(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate | None,
    *,
    usage: x509.ObjectIdentifier | None,
    san: list[x509.GeneralName] | None = None,
) -> x509.Certificate:
    now = dt.datetime.now(dt.timezone.utc)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(ca_cert.subject if ca_cert else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .add_extension(x509.BasicConstraints(ca=ca_cert is None, path_length=None), True)
    )
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), False)
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName(san), False)
    return builder.sign(ca_key, hashes.SHA256())


def make_tls(ca_name: str = "fake-kube-ca") -> FakeTLS:
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _issue(ca_name, ca_key, ca_key, None, usage=None)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _issue(
        "kube-apiserver",
        server_key,
        ca_key,
        ca,
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
        san=[x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
    )
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _issue(CLIENT_USER, client_key, ca_key, ca, usage=ExtendedKeyUsageOID.CLIENT_AUTH)
    pem = serialization.Encoding.PEM
    return FakeTLS(
        ca=ca.public_bytes(pem),
        server_cert=server.public_bytes(pem),
        server_key=_pem_key(server_key),
        client_cert=client.public_bytes(pem),
        client_key=_pem_key(client_key),
    )


# --------------------------------------------------------------------------- object shapes


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _nano_timestamp(nanos: int) -> str:
    """RFC3339Nano with nine digits, as the kubelet prefixes log lines."""
    seconds, fraction = divmod(nanos, 1_000_000_000)
    whole = dt.datetime.fromtimestamp(seconds, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{whole}.{fraction:09d}Z"


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _condition(kind: str, reason: str, message: str, status: str = "True") -> dict[str, Any]:
    now = _now()
    return {
        "type": kind,
        "status": status,
        "lastProbeTime": now,
        "lastTransitionTime": now,
        "reason": reason,
        "message": message,
    }


def _index_set(text: object) -> set[int]:
    """``"0-2,5"`` (completedIndexes, failedIndexes) as a set."""
    indexes: set[int] = set()
    for part in filter(None, str(text or "").split(",")):
        first, _, last = part.partition("-")
        indexes.update(range(int(first), int(last or first) + 1))
    return indexes


def _index_text(indexes: set[int]) -> str:
    """A set as the controller writes it: ascending, runs of consecutive indexes as ranges."""
    runs: list[list[int]] = []
    for index in sorted(indexes):
        if runs and runs[-1][-1] == index - 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def _merge_patch(target: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge_patch(target[key], value)
        else:
            target[key] = value


def _invalid_job(job: dict[str, Any]) -> str | None:
    """The first validation error the real API server would report, or None."""
    meta, spec = job.get("metadata") or {}, job.get("spec") or {}
    if job.get("apiVersion") != "batch/v1" or job.get("kind") != "Job":
        return "apiVersion/kind: must be batch/v1 Job"
    name = str(meta.get("name") or "")
    if not _DNS1123.match(name) or len(name) > 63:
        return f"metadata.name: Invalid value: {name!r}"
    pod = (spec.get("template") or {}).get("spec") or {}
    if spec.get("backoffLimitPerIndex") is not None and (
        spec.get("completionMode") != "Indexed" or pod.get("restartPolicy") != "Never"
    ):
        return (
            "spec.backoffLimitPerIndex: Invalid value: requires completionMode Indexed and "
            "restartPolicy Never"
        )
    if spec.get("completionMode") == "Indexed" and not spec.get("completions"):
        return "spec.completions: Required value: when completionMode is Indexed"
    if pod.get("restartPolicy") not in ("Never", "OnFailure"):
        return 'spec.template.spec.restartPolicy: Unsupported value: must be "OnFailure" or "Never"'
    containers = pod.get("containers") or []
    if not containers:
        return "spec.template.spec.containers: Required value"
    for i, container in enumerate(containers):
        where = f"spec.template.spec.containers[{i}]"
        if not container.get("image"):
            return f"{where}.image: Required value"
        for env in container.get("env") or []:
            if not _ENV_NAME.match(env.get("name", "")):
                return f"{where}.env[].name: Invalid value: {env.get('name')!r}"
        resources = container.get("resources") or {}
        for kind in ("limits", "requests"):
            for resource, value in (resources.get(kind) or {}).items():
                if not _QUANTITY.match(str(value)):
                    return f"{where}.resources.{kind}[{resource}]: Invalid value: {value!r}"
    return None


# --------------------------------------------------------------------------- the server


class FakeKube:
    """State of the fake cluster plus the methods a test uses to play kubelet and controllers."""

    def __init__(self, tls: FakeTLS, directory: Path) -> None:
        self.tls = tls
        self.tokens: set[str] = {GOOD_TOKEN}
        self.users: set[str] = {CLIENT_USER}
        self.namespaces: set[str] = {"default", "ml"}
        self.jobs: dict[tuple[str, str], dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.services: dict[tuple[str, str], dict[str, Any]] = {}
        self.secrets: dict[tuple[str, str], dict[str, Any]] = {}
        self.logs: dict[str, list[tuple[int, str]]] = {}
        self.requests: list[tuple[str, str, str]] = []  # (method, path, who)
        self.pod_deletes: list[str] = []  # names of the pods deleted through the API
        self.drop_job_fields: set[str] = set()  # spec fields an older API server drops
        self.deletes: list[dict[str, Any]] = []  # DeleteOptions received
        self.log_requests: list[dict[str, str]] = []
        self.drops: list[int] = []  # next log responses: cut after this many lines
        self.suspend_new_jobs = False  # what Kueue's admission webhook does
        self.version = 0
        self.closing = False
        self._dir = directory
        self._loop: IOLoop | None = None
        self._changed: locks.Condition | None = None
        self._server: httpserver.HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # ------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def serve(self) -> None:
        paths = self.tls.write(self._dir)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(paths["server_cert"], paths["server_key"])
        context.load_verify_locations(paths["ca"])
        context.verify_mode = ssl.CERT_OPTIONAL  # client certificates are one way in
        ready = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(asyncio.new_event_loop())
            self._loop = IOLoop.current()
            self._changed = locks.Condition()
            app = web.Application(_routes(), fake=self)
            self._server = httpserver.HTTPServer(app, ssl_options=context)
            sockets = netutil.bind_sockets(0, "127.0.0.1")
            self.port = sockets[0].getsockname()[1]
            self._server.add_sockets(sockets)
            ready.set()
            self._loop.start()
            self._loop.close(all_fds=True)

        self._thread = threading.Thread(target=serve, name="fake-kube", daemon=True)
        self._thread.start()
        ready.wait(10)

    def shutdown(self) -> None:
        async def shutdown() -> None:
            assert self._server is not None and self._loop is not None
            self._server.stop()
            self.closing = True
            self._touch()
            await asyncio.sleep(0.05)  # let open log streams see `closing` and finish
            await self._server.close_all_connections()
            self._loop.stop()

        assert self._loop is not None and self._thread is not None
        self._loop.add_callback(shutdown)
        self._thread.join(10)

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the server's loop (where the handlers read the state) and wait."""
        assert self._loop is not None
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(fn())
                self._touch()
            except BaseException as exc:
                future.set_exception(exc)

        self._loop.add_callback(run)
        return future.result(10)

    def _touch(self) -> None:
        self.version += 1
        assert self._changed is not None
        self._changed.notify_all()

    async def changed(self, seen: int) -> None:
        if self.version == seen and not self.closing:
            assert self._changed is not None
            await self._changed.wait(timeout=dt.timedelta(seconds=1))

    # ------------------------------------------------------------ the "controllers"

    def create_job(self, namespace: str, job: dict[str, Any]) -> dict[str, Any]:
        meta, spec = job["metadata"], job["spec"]
        for field in self.drop_job_fields:
            spec.pop(field, None)
        uid = str(uuid.uuid4())
        name = meta["name"]
        meta.update(namespace=namespace, uid=uid, resourceVersion="1", generation=1)
        meta["creationTimestamp"] = _now()
        controller_labels = {
            "batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": name,
            "controller-uid": uid,
            "job-name": name,
        }
        spec.setdefault("completions", 1)
        spec.setdefault("parallelism", 1)
        spec["suspend"] = bool(spec.get("suspend")) or self.suspend_new_jobs
        spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
        template_meta = spec["template"].setdefault("metadata", {})
        template_meta["labels"] = {**template_meta.get("labels", {}), **controller_labels}
        job["status"] = {}
        self.jobs[(namespace, name)] = job
        if not spec["suspend"]:
            if spec.get("completionMode") == "Indexed":
                self._start_indexes(namespace, job)
            else:
                self._create_pod(namespace, job)
        return job

    def _create_pod(self, namespace: str, job: dict[str, Any], index: int | None = None) -> None:
        template = json.loads(json.dumps(job["spec"]["template"]))
        job_name = job["metadata"]["name"]
        name = f"{job_name}-{secrets.token_hex(3)[:5]}"
        annotations = {}
        if index is not None:
            name = f"{job_name}-{index}-{secrets.token_hex(3)[:5]}"
            annotations[INDEX_KEY] = str(index)
            template["metadata"]["labels"][INDEX_KEY] = str(index)
            template["spec"]["hostname"] = f"{job_name}-{index}"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": str(uuid.uuid4()),
                "creationTimestamp": _now(),
                "labels": template["metadata"]["labels"],
                "annotations": annotations,
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": job["metadata"]["name"],
                        "uid": job["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": template["spec"],
            "status": {"phase": "Pending", "qosClass": "BestEffort"},
        }
        self.pods[(namespace, name)] = pod
        self.logs[name] = []
        job["status"]["active"] = job["status"].get("active", 0) + 1
        job["status"].setdefault("startTime", _now())

    def _job_pods(self, namespace: str, job: dict[str, Any]) -> list[dict[str, Any]]:
        uid = job["metadata"]["uid"]
        return [
            p
            for (ns, _), p in self.pods.items()
            if ns == namespace and p["metadata"]["labels"].get("controller-uid") == uid
        ]

    def _start_indexes(self, namespace: str, job: dict[str, Any]) -> None:
        """The Job controller's loop for an Indexed Job: a pod for each index that has none and
        has not ended, lowest first, while fewer than ``parallelism`` run or wait."""
        spec, status = job["spec"], job["status"]
        pods = self._job_pods(namespace, job)
        going = [p for p in pods if p["status"].get("phase") in ("Pending", "Running")]
        status["active"] = len(going)
        have = {p["metadata"]["annotations"].get(INDEX_KEY) for p in pods}
        ended = _index_set(status.get("completedIndexes")) | _index_set(status.get("failedIndexes"))
        for index in range(int(spec["completions"])):
            if status["active"] >= int(spec["parallelism"]):
                break
            if str(index) not in have and index not in ended:
                self._create_pod(namespace, job, index)

    def _end_index(self, namespace: str, job: dict[str, Any], index: int, ok: bool) -> None:
        """A sweep's index ended (``backoffLimitPerIndex: 0``: never retried); the next pending
        index gets its pod, and the Job ends once every index has."""
        status = job["status"]
        field = "completedIndexes" if ok else "failedIndexes"
        status[field] = _index_text(_index_set(status.get(field)) | {index})
        counter = "succeeded" if ok else "failed"
        status[counter] = status.get(counter, 0) + 1
        self._start_indexes(namespace, job)
        failed = _index_set(status.get("failedIndexes"))
        ended = _index_set(status.get("completedIndexes")) | failed
        if len(ended) < int(job["spec"]["completions"]):
            return
        status.pop("active", None)
        if failed:
            message = "Job has failed indexes"
            status["conditions"] = [
                _condition("FailureTarget", "FailedIndexes", message),
                _condition("Failed", "FailedIndexes", message),
            ]
        else:
            status["completionTime"] = _now()
            status["conditions"] = [_condition("Complete", "CompletionsReached", "done")]

    def delete_pod(self, namespace: str, name: str) -> bool:
        """A pod deleted through the API; one of a sweep's Job that had not ended fails its
        index, as the Job controller counts a deleted pod that did not succeed."""
        pod = self.pods.pop((namespace, name), None)
        if pod is None:
            return False
        self.pod_deletes.append(name)
        uid = pod["metadata"]["labels"].get("controller-uid")
        job = next((j for j in self.jobs.values() if j["metadata"]["uid"] == uid), None)
        index = pod["metadata"]["annotations"].get(INDEX_KEY)
        if (
            job is not None
            and index is not None
            and job["spec"].get("backoffLimitPerIndex") is not None
            and pod["status"].get("phase") in ("Pending", "Running")
        ):
            self._end_index(namespace, job, int(index), ok=False)
        return True

    def pod_of(
        self, job: str, namespace: str = "default", rank: int | None = None
    ) -> dict[str, Any]:
        uid = self.jobs[(namespace, job)]["metadata"]["uid"]
        return next(
            p
            for (ns, _), p in self.pods.items()
            if ns == namespace
            and p["metadata"]["labels"].get("controller-uid") == uid
            and "j2c.test/retried" not in p["metadata"]["labels"]
            and (rank is None or p["metadata"]["annotations"].get(INDEX_KEY) == str(rank))
        )

    def _container_status(self, pod: dict[str, Any], state: dict[str, Any]) -> None:
        container = pod["spec"]["containers"][0]
        pod["status"]["containerStatuses"] = [
            {
                "name": container["name"],
                "image": container["image"],
                "imageID": "",
                "ready": "running" in state,
                "restartCount": 0,
                "started": "running" in state,
                "state": state,
                "lastState": {},
            }
        ]

    def unschedulable(self, job: str, message: str) -> None:
        def run() -> None:
            pod = self.pod_of(job)
            pod["status"]["conditions"] = [
                _condition("PodScheduled", "Unschedulable", message, status="False")
            ]

        self.call(run)

    def schedule(self, job: str) -> None:
        def run() -> None:
            pod = self.pod_of(job)
            pod["spec"]["nodeName"] = "gpu-node-1"
            pod["status"]["conditions"] = [_condition("PodScheduled", "", "")]
            self._container_status(pod, {"waiting": {"reason": "ContainerCreating"}})

        self.call(run)

    def waiting(self, job: str, reason: str, message: str, last_exit: int | None = None) -> None:
        def run() -> None:
            pod = self.pod_of(job)
            pod["spec"]["nodeName"] = "gpu-node-1"
            pod["status"]["conditions"] = [_condition("PodScheduled", "", "")]
            self._container_status(pod, {"waiting": {"reason": reason, "message": message}})
            if last_exit is not None:
                status = pod["status"]["containerStatuses"][0]
                status["lastState"] = {"terminated": {"exitCode": last_exit, "reason": "Error"}}
                status["restartCount"] = 3
                pod["status"]["phase"] = "Running"

        self.call(run)

    def start(self, job: str, rank: int | None = None) -> None:
        def run() -> None:
            pod = self.pod_of(job, rank=rank)
            pod["spec"]["nodeName"] = "gpu-node-1"
            pod["status"].update(phase="Running", startTime=_now(), podIP="10.0.0.7")
            pod["status"]["conditions"] = [_condition("PodScheduled", "", "")]
            self._container_status(pod, {"running": {"startedAt": _now()}})
            self.jobs[("default", job)]["status"]["ready"] = 1

        self.call(run)

    def log(self, job: str, *lines: str, same_time: bool = False, rank: int | None = None) -> None:
        """Append lines to the container's log, each stamped now (or all with one stamp)."""

        def run() -> None:
            pod = self.pod_of(job, rank=rank)
            stamp = time.time_ns()
            for line in lines:
                self.logs[pod["metadata"]["name"]].append((stamp, line))
                if not same_time:
                    stamp = max(time.time_ns(), stamp + 1)

        self.call(run)

    def finish(
        self, job: str, exit_code: int, reason: str | None = None, rank: int | None = None
    ) -> None:
        """The container exits; the Job controller records Complete or Failed (of an Indexed
        Job: once every index succeeded, or at the first failure, removing the other pods)."""

        def run() -> None:
            if rank is not None:
                return self._finish_rank(job, exit_code, rank)
            pod = self.pod_of(job)
            terminated = {
                "exitCode": exit_code,
                "reason": reason or ("Completed" if exit_code == 0 else "Error"),
                "startedAt": _now(),
                "finishedAt": _now(),
                "containerID": "containerd://" + secrets.token_hex(8),
            }
            self._container_status(pod, {"terminated": terminated})
            pod["status"]["phase"] = "Succeeded" if exit_code == 0 else "Failed"
            status = self.jobs[("default", job)]["status"]
            status.pop("active", None)
            status["ready"] = 0
            if exit_code == 0:
                status.update(succeeded=1, completionTime=_now())
                status["conditions"] = [
                    _condition(
                        "SuccessCriteriaMet",
                        "CompletionsReached",
                        "Reached expected number of succeeded pods",
                    ),
                    _condition(
                        "Complete",
                        "CompletionsReached",
                        "Reached expected number of succeeded pods",
                    ),
                ]
            else:
                status["failed"] = 1
                message = "Job has reached the specified backoff limit"
                status["conditions"] = [
                    _condition("FailureTarget", "BackoffLimitExceeded", message),
                    _condition("Failed", "BackoffLimitExceeded", message),
                ]

        self.call(run)

    def disrupt_and_retry(self, job: str) -> None:
        """The job's pod is evicted (DisruptionTarget, Failed) and the Job controller makes a new
        one, as a ``podFailurePolicy`` that ignores disruptions does."""

        def run() -> None:
            pod = self.pod_of(job)
            terminated = {"exitCode": 143, "reason": "Error", "finishedAt": _now()}
            self._container_status(pod, {"terminated": terminated})
            pod["status"]["phase"] = "Failed"
            pod["status"]["conditions"] = [
                _condition("DisruptionTarget", "EvictionByEvictionAPI", "Eviction API: evicting")
            ]
            pod["metadata"]["labels"] = {**pod["metadata"]["labels"], "j2c.test/retried": "1"}

        self.call(run)
        time.sleep(1.01)  # the new pod is created in a later second than the first one ended
        self.call(lambda: self._create_pod("default", self.jobs[("default", job)]))

    def pod_ends(self, name: str, exit_code: int, *lines: str, namespace: str = "default") -> None:
        """Pod ``name`` (any pod, one made through the API included) ran: it printed ``lines``
        and its container exited with ``exit_code``."""

        def run() -> None:
            pod = self.pods[(namespace, name)]
            stamp = time.time_ns()
            self.logs.setdefault(name, []).extend((stamp + i, line) for i, line in enumerate(lines))
            terminated = {"exitCode": exit_code, "reason": "Completed", "finishedAt": _now()}
            self._container_status(pod, {"terminated": terminated})
            pod["status"]["phase"] = "Succeeded" if exit_code == 0 else "Failed"

        self.call(run)

    def _finish_rank(self, job: str, exit_code: int, rank: int) -> None:
        pod = self.pod_of(job, rank=rank)
        terminated = {
            "exitCode": exit_code,
            "reason": "Completed" if exit_code == 0 else "Error",
            "startedAt": _now(),
            "finishedAt": _nano_timestamp(time.time_ns()),  # finer than a real one: order
            "containerID": "containerd://" + secrets.token_hex(8),
        }
        self._container_status(pod, {"terminated": terminated})
        pod["status"]["phase"] = "Succeeded" if exit_code == 0 else "Failed"
        record = self.jobs[("default", job)]
        if record["spec"].get("backoffLimitPerIndex") is not None:
            return self._end_index("default", record, rank, ok=exit_code == 0)
        status = record["status"]
        status["active"] = status.get("active", 1) - 1
        if exit_code == 0:
            status["succeeded"] = status.get("succeeded", 0) + 1
            if status["succeeded"] == int(record["spec"]["completions"]):
                status.pop("active", None)
                status["conditions"] = [_condition("Complete", "CompletionsReached", "done")]
            return
        status["failed"] = status.get("failed", 0) + 1
        message = (
            f"Container j2c for pod default/{pod['metadata']['name']} failed with exit code "
            f"{exit_code} matching FailJob rule at index 0"
        )
        status["conditions"] = [
            _condition("FailureTarget", "PodFailurePolicy", message),
            _condition("Failed", "PodFailurePolicy", message),
        ]
        status.pop("active", None)
        # The controller terminates the Job's other running pods.
        for key, other in list(self.pods.items()):
            same_job = other["metadata"]["labels"].get("job-name") == job
            if (
                other is not pod
                and same_job
                and other["status"].get("phase") in ("Pending", "Running")
            ):
                del self.pods[key]

    def evict_pod(self, namespace: str, name: str) -> bool:
        """The Eviction API on one pod, and what the Job controller does with it (see the
        module docstring); False when there is no such pod."""
        pod = self.pods.get((namespace, name))
        if pod is None:
            return False
        uid = pod["metadata"]["labels"].get("controller-uid")
        job = next((j for j in self.jobs.values() if j["metadata"]["uid"] == uid), None)
        disruption = _condition(
            "DisruptionTarget", "EvictionByEvictionAPI", "Eviction API: evicting"
        )
        pod["status"]["conditions"] = [*pod["status"].get("conditions", []), disruption]
        terminated = {
            "exitCode": 143,
            "reason": "Error",
            "startedAt": _now(),
            "finishedAt": _now(),
            "containerID": "containerd://" + secrets.token_hex(8),
        }
        self._container_status(pod, {"terminated": terminated})
        pod["status"]["phase"] = "Failed"
        if job is not None:
            self._disrupted(namespace, job, pod)
        del self.pods[(namespace, name)]
        self.pod_deletes.append(name)
        return True

    def _disrupted(self, namespace: str, job: dict[str, Any], pod: dict[str, Any]) -> None:
        """The Job controller's podFailurePolicy for a pod that failed by a disruption."""
        status = job["status"]
        status["active"] = max(0, status.get("active", 1) - 1)
        rules = (job["spec"].get("podFailurePolicy") or {}).get("rules") or []
        for index, rule in enumerate(rules):
            wanted = rule.get("onPodConditions") or []
            if not any(c.get("type") == "DisruptionTarget" for c in wanted):
                continue
            if rule.get("action") == "Ignore":
                self._create_pod(namespace, job)
                return
            if rule.get("action") == "FailJob":
                status["failed"] = status.get("failed", 0) + 1
                message = (
                    f"Pod {namespace}/{pod['metadata']['name']} has condition DisruptionTarget "
                    f"matching FailJob rule at index {index}"
                )
                status["conditions"] = [
                    _condition("FailureTarget", "PodFailurePolicy", message),
                    _condition("Failed", "PodFailurePolicy", message),
                ]
                status.pop("active", None)
                return
        status["failed"] = status.get("failed", 0) + 1
        message = "Job has reached the specified backoff limit"
        status["conditions"] = [
            _condition("FailureTarget", "BackoffLimitExceeded", message),
            _condition("Failed", "BackoffLimitExceeded", message),
        ]
        status.pop("active", None)

    def exceed_deadline(self, job: str) -> None:
        """activeDeadlineSeconds passed: the controller deletes the pod and fails the Job."""

        def run() -> None:
            pod = self.pod_of(job)
            del self.pods[("default", pod["metadata"]["name"])]
            status = self.jobs[("default", job)]["status"]
            status.pop("active", None)
            status["failed"] = 1
            message = "Job was active longer than specified deadline"
            status["conditions"] = [
                _condition("FailureTarget", "DeadlineExceeded", message),
                _condition("Failed", "DeadlineExceeded", message),
            ]

        self.call(run)

    def expire(self, job: str) -> None:
        """ttlSecondsAfterFinished passed: the Job and its pods are garbage-collected."""

        def run() -> None:
            self._delete_job("default", job)

        self.call(run)

    def _delete_job(self, namespace: str, name: str) -> None:
        uid = self.jobs.pop((namespace, name))["metadata"]["uid"]
        for key, pod in list(self.pods.items()):
            if pod["metadata"]["labels"].get("controller-uid") == uid:
                del self.pods[key]
        for kept in (self.services, self.secrets):
            for key, item in list(kept.items()):
                owners = item["metadata"].get("ownerReferences") or []
                if any(owner.get("uid") == uid for owner in owners):
                    del kept[key]


def _routes() -> list[tuple[str, type[web.RequestHandler]]]:
    return [
        (r"/apis/batch/v1/namespaces/([^/]+)/jobs", JobsHandler),
        (r"/apis/batch/v1/namespaces/([^/]+)/jobs/([^/]+)", JobHandler),
        (r"/api/v1/namespaces/([^/]+)/pods", PodsHandler),
        (r"/api/v1/namespaces/([^/]+)/pods/([^/]+)", PodHandler),
        (r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/log", LogHandler),
        (r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/eviction", EvictionHandler),
        (r"/api/v1/namespaces/([^/]+)/services", ServicesHandler),
        (r"/api/v1/namespaces/([^/]+)/secrets", SecretsHandler),
        (r"/api/v1/namespaces/([^/]+)/secrets/([^/]+)", SecretHandler),
        (r"/api/v1/namespaces/([^/]+)/services/([^/]+)", ServiceHandler),
    ]


class _KubeHandler(web.RequestHandler):
    @property
    def fake(self) -> FakeKube:
        fake: FakeKube = self.settings["fake"]
        return fake

    def prepare(self) -> None:
        who = self._identity()
        self.fake.requests.append((self.request.method or "", self.request.path, who or ""))
        if who is None:
            self.reply(401, _status(401, "Unauthorized", "Unauthorized"))

    def _identity(self) -> str | None:
        header = self.request.headers.get("Authorization", "")
        if header.startswith("Bearer ") and header[7:] in self.fake.tokens:
            return "token:" + header[7:]
        cert = self.request.get_ssl_certificate()
        if isinstance(cert, dict):
            for rdn in cert.get("subject", ()):
                for key, value in rdn:
                    if key == "commonName" and value in self.fake.users:
                        return f"cert:{value}"
        return None

    def reply(self, code: int, body: dict[str, Any]) -> None:
        self.set_status(code)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(body))

    def not_found(self, kind: str, name: str) -> None:
        self.reply(404, _status(404, "NotFound", f'{kind} "{name}" not found'))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        self.reply(status_code, _status(status_code, "InternalError", self._reason))


class JobsHandler(_KubeHandler):
    def post(self, namespace: str) -> None:
        job = json.loads(self.request.body)
        if namespace not in self.fake.namespaces:
            return self.not_found("namespaces", namespace)
        name = (job.get("metadata") or {}).get("name", "")
        problem = _invalid_job(job)
        if problem:
            message = f'Job.batch "{name}" is invalid: {problem}'
            return self.reply(422, _status(422, "Invalid", message))
        if (namespace, name) in self.fake.jobs:
            message = f'jobs.batch "{name}" already exists'
            return self.reply(409, _status(409, "AlreadyExists", message))
        created = self.fake.create_job(namespace, job)
        self.fake._touch()
        self.reply(201, created)


class JobHandler(_KubeHandler):
    def _job(self, namespace: str, name: str) -> dict[str, Any] | None:
        job = self.fake.jobs.get((namespace, name))
        if job is None:
            self.not_found("jobs.batch", name)
        return job

    def get(self, namespace: str, name: str) -> None:
        job = self._job(namespace, name)
        if job is not None:
            self.reply(200, job)

    def patch(self, namespace: str, name: str) -> None:
        if self.request.headers.get("Content-Type") != "application/merge-patch+json":
            return self.reply(415, _status(415, "UnsupportedMediaType", "unsupported patch type"))
        job = self._job(namespace, name)
        if job is None:
            return
        patch = json.loads(self.request.body)
        meta = job["metadata"]
        wanted = (patch.get("metadata") or {}).get("resourceVersion")
        if wanted is not None and wanted != meta["resourceVersion"]:
            message = (
                f'Operation cannot be fulfilled on jobs.batch "{name}": the object has been '
                "modified; please apply your changes to the latest version and try again"
            )
            return self.reply(409, _status(409, "Conflict", message))
        _merge_patch(job, patch)
        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
        self.fake._touch()
        self.reply(200, job)

    def delete(self, namespace: str, name: str) -> None:
        options = json.loads(self.request.body or b"{}")
        job = self._job(namespace, name)
        if job is None:
            return
        self.fake.deletes.append({"name": name, "options": options, "job": json.dumps(job)})
        # Background propagation: the Job goes now, the garbage collector removes its pods.
        self.fake._delete_job(namespace, name)
        self.fake._touch()
        self.reply(200, {**_status(200, "", ""), "status": "Success", "details": {"name": name}})


class PodsHandler(_KubeHandler):
    def get(self, namespace: str) -> None:
        wanted = {}
        for term in filter(None, self.get_argument("labelSelector", "").split(",")):
            key, _, value = term.replace("==", "=").partition("=")
            wanted[key] = value
        items = [
            pod
            for (ns, _), pod in self.fake.pods.items()
            if ns == namespace
            and all(pod["metadata"]["labels"].get(k) == v for k, v in wanted.items())
        ]
        body = {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}
        self.reply(200, body)

    def post(self, namespace: str) -> None:
        pod = json.loads(self.request.body)
        meta = pod.setdefault("metadata", {})
        name = meta.get("name", "")
        if (namespace, name) in self.fake.pods:
            return self.reply(409, _status(409, "AlreadyExists", f'pods "{name}" already exists'))
        meta.update(namespace=namespace, uid=str(uuid.uuid4()), creationTimestamp=_now())
        meta.setdefault("labels", {})
        meta.setdefault("annotations", {})
        pod["status"] = {"phase": "Pending"}
        self.fake.pods[(namespace, name)] = pod
        self.fake.logs.setdefault(name, [])
        self.fake._touch()
        self.reply(201, pod)


class ServicesHandler(_KubeHandler):
    def post(self, namespace: str) -> None:
        service = json.loads(self.request.body)
        name = (service.get("metadata") or {}).get("name", "")
        if service.get("apiVersion") != "v1" or service.get("kind") != "Service":
            return self.reply(422, _status(422, "Invalid", "apiVersion/kind: must be v1 Service"))
        if (namespace, name) in self.fake.services:
            message = f'services "{name}" already exists'
            return self.reply(409, _status(409, "AlreadyExists", message))
        service["metadata"].update(namespace=namespace, uid=str(uuid.uuid4()))
        self.fake.services[(namespace, name)] = service
        self.fake._touch()
        self.reply(201, service)


class ServiceHandler(_KubeHandler):
    def get(self, namespace: str, name: str) -> None:
        service = self.fake.services.get((namespace, name))
        if service is None:
            return self.not_found("services", name)
        self.reply(200, service)

    def delete(self, namespace: str, name: str) -> None:
        if self.fake.services.pop((namespace, name), None) is None:
            return self.not_found("services", name)
        self.fake._touch()
        self.reply(200, {**_status(200, "", ""), "status": "Success", "details": {"name": name}})


class SecretsHandler(_KubeHandler):
    def post(self, namespace: str) -> None:
        secret = json.loads(self.request.body)
        name = (secret.get("metadata") or {}).get("name", "")
        if secret.get("apiVersion") != "v1" or secret.get("kind") != "Secret":
            return self.reply(422, _status(422, "Invalid", "apiVersion/kind: must be v1 Secret"))
        if (namespace, name) in self.fake.secrets:
            message = f'secrets "{name}" already exists'
            return self.reply(409, _status(409, "AlreadyExists", message))
        secret["metadata"].update(namespace=namespace, uid=str(uuid.uuid4()))
        self.fake.secrets[(namespace, name)] = secret
        self.fake._touch()
        self.reply(201, secret)


class SecretHandler(_KubeHandler):
    def get(self, namespace: str, name: str) -> None:
        secret = self.fake.secrets.get((namespace, name))
        if secret is None:
            return self.not_found("secrets", name)
        self.reply(200, secret)

    def put(self, namespace: str, name: str) -> None:
        old = self.fake.secrets.get((namespace, name))
        if old is None:
            return self.not_found("secrets", name)
        secret = json.loads(self.request.body)
        secret["metadata"] = {**old["metadata"], **secret["metadata"]}
        self.fake.secrets[(namespace, name)] = secret
        self.fake._touch()
        self.reply(200, secret)

    def patch(self, namespace: str, name: str) -> None:
        secret = self.fake.secrets.get((namespace, name))
        if secret is None:
            return self.not_found("secrets", name)
        _merge_patch(secret, json.loads(self.request.body))
        self.fake._touch()
        self.reply(200, secret)


class PodHandler(_KubeHandler):
    def get(self, namespace: str, name: str) -> None:
        pod = self.fake.pods.get((namespace, name))
        if pod is None:
            return self.not_found("pods", name)
        self.reply(200, pod)

    def delete(self, namespace: str, name: str) -> None:
        pod = self.fake.pods.get((namespace, name))
        if pod is None or not self.fake.delete_pod(namespace, name):
            return self.not_found("pods", name)
        self.fake._touch()
        self.reply(200, pod)


class EvictionHandler(_KubeHandler):
    def post(self, namespace: str, name: str) -> None:
        body = json.loads(self.request.body or b"{}")
        if body.get("kind") != "Eviction" or body.get("apiVersion") != "policy/v1":
            return self.reply(400, _status(400, "BadRequest", "expected a policy/v1 Eviction"))
        if not self.fake.evict_pod(namespace, name):
            return self.not_found("pods", name)
        self.fake._touch()
        self.reply(201, {**_status(201, "", ""), "status": "Success"})


def _since_nanos(text: str) -> int:
    moment = dt.datetime.strptime(text[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=dt.timezone.utc)
    return int(moment.timestamp()) * 1_000_000_000


class LogHandler(_KubeHandler):
    async def get(self, namespace: str, name: str) -> None:
        fake = self.fake
        fake.log_requests.append({k: self.get_argument(k) for k in self.request.arguments})
        pod = fake.pods.get((namespace, name))
        if pod is None:
            return self.not_found("pods", name)
        state = ((pod["status"].get("containerStatuses") or [{}])[0]).get("state") or {}
        if "running" not in state and "terminated" not in state:
            reason = (state.get("waiting") or {}).get("reason", "ContainerCreating")
            message = f'container "j2c" in pod "{name}" is waiting to start: {reason}'
            return self.reply(400, _status(400, "BadRequest", message))
        follow = self.get_argument("follow", "false") == "true"
        stamps = self.get_argument("timestamps", "false") == "true"
        since = self.get_argument("sinceTime", None)
        since_nanos = _since_nanos(since) if since else 0
        cut_after = fake.drops.pop(0) if fake.drops else None
        self.set_header("Content-Type", "text/plain")
        sent = index = 0
        while True:
            seen = fake.version
            lines = fake.logs.get(name, [])
            while index < len(lines):
                nanos, text = lines[index]
                index += 1
                if nanos < since_nanos:
                    continue
                out = (f"{_nano_timestamp(nanos)} " if stamps else "") + text + "\n"
                if cut_after is not None and sent == cut_after:
                    # Drop the connection in the middle of a line, as a broken proxy would.
                    self.write(out[: len(out) // 2])
                    await self.flush()
                    connection = self.request.connection
                    assert isinstance(connection, HTTP1Connection)
                    connection.detach().close()
                    return
                self.write(out)
                sent += 1
            await self.flush()
            pod = fake.pods.get((namespace, name))
            state = ((pod or {}).get("status", {}).get("containerStatuses") or [{}])[0]
            if not follow or pod is None or "terminated" in state.get("state", {}):
                break
            if fake.closing:
                break
            await fake.changed(seen)
        self.finish()


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def kube_tls() -> FakeTLS:
    return make_tls()


@pytest.fixture
def fake_kube(kube_tls: FakeTLS, tmp_path: Path) -> Iterator[FakeKube]:
    fake = FakeKube(kube_tls, tmp_path / "fake-kube-tls")
    fake.serve()
    yield fake
    fake.shutdown()


def write_kubeconfig(
    path: Path,
    fake: FakeKube,
    *,
    user: dict[str, Any] | None = None,
    namespace: str | None = None,
    ca: bytes | None = None,
    server: str | None = None,
) -> Path:
    """A kubeconfig with one context ``fake`` pointing at ``fake`` (token auth by default)."""
    import base64

    context: dict[str, Any] = {"cluster": "fake", "user": "tester"}
    if namespace:
        context["namespace"] = namespace
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "fake",
        "clusters": [
            {
                "name": "fake",
                "cluster": {
                    "server": server or fake.url,
                    "certificate-authority-data": base64.b64encode(ca or fake.tls.ca).decode(),
                },
            }
        ],
        "users": [{"name": "tester", "user": user if user is not None else {"token": GOOD_TOKEN}}],
        "contexts": [{"name": "fake", "context": context}],
    }
    path.write_text(yaml.safe_dump(config))
    return path
