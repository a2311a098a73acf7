"""The requests behind a sweep's variants on Kubernetes: each variant is one index of ONE
Indexed Job, read, followed and cancelled as a job of its own (what that means, and why
cancelling works as it does: :mod:`.array`).

:class:`IndexedJobs` owns what the indexes of one Job share in a process: one read of the Job
and its pods for all of them (at most every :data:`ARRAY_REFRESH_S`; each fresh read also
carries out the Job's cancels), a lock per Job, the indexes cancelled here, and the last state
of each Job j2c deleted. It asks the backend for the requests themselves (:class:`KubeCalls`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Protocol

import httpx

from j2c_server.core.errors import SchedulerError, SchedulerUnavailable
from j2c_server.schedulers.base import SchedulerState
from j2c_server.schedulers.kubernetes.array import (
    ANNOTATION_CANCELLED_INDEXES,
    cancelled_indexes,
    ended_indexes,
    format_indexes,
    index_state,
    only_cancelled_left,
    pods_to_stop,
)
from j2c_server.schedulers.kubernetes.handles import (
    JSON_MERGE_PATCH,
    job_name_of,
    jobs_url,
    lost,
    namespace_of,
    pods_url,
)
from j2c_server.schedulers.kubernetes.ranks import rank_pods
from j2c_server.schedulers.kubernetes.status import current_pod, exit_code, job_finished
from j2c_server.wire.api import JobHandle, JobStatus

log = logging.getLogger("j2c")
# An Indexed Job's variants all read its one Job and pod list: at most this often for all.
ARRAY_REFRESH_S = 0.5
# The last states of Jobs j2c deleted, kept for their variants' final reads (seconds later).
ENDED_KEPT = 64
Snapshot = tuple[dict[str, Any] | None, list[dict[str, Any]]]


class KubeCalls(Protocol):
    """The backend's requests that :class:`IndexedJobs` uses."""

    async def _request(
        self, method: str, url: str, *, allow: tuple[int, ...] = (), **kwargs: Any
    ) -> httpx.Response: ...

    async def _get_job(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    async def _job_and_pods(self, handle: JobHandle) -> Snapshot: ...

    async def _delete_job(self, namespace: str, name: str, uid: str) -> None: ...


class IndexedJobs:
    def __init__(self, calls: KubeCalls, refresh_s: float) -> None:
        self._calls = calls
        self._refresh_s = min(ARRAY_REFRESH_S, refresh_s)
        self._reads: dict[str, tuple[float, Snapshot]] = {}  # Job name -> (when, its state)
        self._locks: dict[str, asyncio.Lock] = {}
        self._cancelled: dict[str, set[int]] = {}  # Job uid -> indexes cancelled here
        self._ended: dict[str, Snapshot] = {}  # Job uid -> its last state before j2c deleted it

    async def status(self, handle: JobHandle, index: int) -> SchedulerState:
        job, pods = await self.read(handle)
        if job is not None:
            return self.state_of(job, pods, index)
        ended, ended_pods = self._ended.get(str(handle.data.get("uid")), (None, []))
        if ended is not None:  # j2c deleted it once only cancelled indexes were left
            state = self.state_of(ended, ended_pods, index)
            if state.status.terminal:
                return state
            return SchedulerState(status=JobStatus.cancelled, message="cancelled")
        if handle.data.get("cancelled"):
            return SchedulerState(status=JobStatus.cancelled, message="cancelled")
        return lost(handle)

    async def exit_code(self, handle: JobHandle, index: int) -> int | None:
        job, pods = await self.read(handle)
        if job is None:
            job, pods = self._ended.get(str(handle.data.get("uid")), (None, []))
        code = exit_code(current_pod(job, rank_pods(pods, index)))
        if code is None and job is not None:
            code = self.state_of(job, pods, index).exit_code
        return code

    def state_of(
        self, job: dict[str, Any], pods: list[dict[str, Any]], index: int
    ) -> SchedulerState:
        return index_state(job, pods, index, cancelled=index in self._cancelled_of(job))

    async def read(self, handle: JobHandle) -> Snapshot:
        """The Job (None: gone) and its pods, read at most every :data:`ARRAY_REFRESH_S` for
        all its indexes; each fresh read also carries out the Job's cancels (a refusal of that
        is logged, never the read's failure: the next read tries again)."""
        name = job_name_of(handle)
        async with self._lock(name):
            kept = self._reads.get(name)
            now = time.monotonic()
            if kept is not None and now - kept[0] < self._refresh_s:
                return kept[1]
            # What is older than that is never used again: a server with many sweeps keeps
            # only the reads of the moment.
            self._reads = {k: v for k, v in self._reads.items() if now - v[0] < self._refresh_s}
            job, pods = await self._calls._job_and_pods(handle)
            try:
                changed = job is not None and await self._enforce(namespace_of(handle), job, pods)
            except SchedulerError as exc:
                log.warning("j2c: cannot stop the cancelled variants of Job %s: %s", name, exc)
                changed = False
            if changed:
                job, pods = await self._calls._job_and_pods(handle)
            self._reads[name] = (time.monotonic(), (job, pods))
            return job, pods

    async def cancel(self, handle: JobHandle, index: int) -> None:
        """Record the index as cancelled on the Job, then stop it. An index that already
        ended keeps its outcome."""
        namespace, name = namespace_of(handle), job_name_of(handle)
        async with self._lock(name):
            self._reads.pop(name, None)
            job, pods = await self._calls._job_and_pods(handle)
            if job is None or job_finished(job):
                return
            completed, failed = ended_indexes(job)
            if index in completed or index in failed:
                return
            self._cancelled.setdefault(str(job["metadata"]["uid"]), set()).add(index)
            handle.data["cancelled"] = True
            job = await self._record_cancel(namespace, job, index)
            await self._enforce(namespace, job, pods)

    def _lock(self, name: str) -> asyncio.Lock:
        return self._locks.setdefault(name, asyncio.Lock())

    def _cancelled_of(self, job: dict[str, Any]) -> set[int]:
        """The Job's cancelled indexes: its annotation's, and those cancelled here (a read may
        come before the annotation's write)."""
        uid = str(job["metadata"].get("uid"))
        return cancelled_indexes(job) | self._cancelled.get(uid, set())

    async def _enforce(
        self, namespace: str, job: dict[str, Any], pods: list[dict[str, Any]]
    ) -> bool:
        """Stop what the Job's cancelled indexes still run: the whole Job when only they are
        left, else their pods. Whether anything was deleted."""
        cancelled = self._cancelled_of(job)
        if not cancelled or job_finished(job):
            return False
        if only_cancelled_left(job, cancelled):
            uid = str(job["metadata"]["uid"])
            self._ended[uid] = (job, pods)
            while len(self._ended) > ENDED_KEPT:
                del self._ended[next(iter(self._ended))]
            await self._calls._delete_job(namespace, str(job["metadata"]["name"]), uid)
            return True
        names = pods_to_stop(pods, cancelled)
        for pod in names:
            await self._calls._request("DELETE", f"{pods_url(namespace)}/{pod}", allow=(404,))
        return bool(names)

    async def _record_cancel(
        self, namespace: str, job: dict[str, Any], index: int
    ) -> dict[str, Any]:
        """Add ``index`` to the Job's cancelled-indexes annotation, guarded by its
        resourceVersion (another j2c process may be adding one too); the Job as patched."""
        name = str(job["metadata"]["name"])
        headers = {"Content-Type": JSON_MERGE_PATCH}
        for _ in range(5):
            wanted = format_indexes(cancelled_indexes(job) | {index})
            metadata: dict[str, Any] = {"annotations": {ANNOTATION_CANCELLED_INDEXES: wanted}}
            if job["metadata"].get("resourceVersion"):
                metadata["resourceVersion"] = job["metadata"]["resourceVersion"]
            response = await self._calls._request(
                "PATCH",
                f"{jobs_url(namespace)}/{name}",
                json={"metadata": metadata},
                headers=headers,
                allow=(404, 409),
            )
            if response.status_code == 404:
                return job
            if response.status_code != 409:
                patched: dict[str, Any] = response.json()
                return patched
            fresh = await self._calls._get_job(namespace, name)
            if fresh is None:
                return job
            job = fresh
        raise SchedulerUnavailable(
            f"the Job {name} kept changing while j2c recorded the cancel of index {index}; "
            "try again"
        )
