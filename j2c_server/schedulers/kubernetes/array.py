"""A sweep as ONE Indexed Job: its manifest, one index (one variant) read as a job of its own,
and what cancelling one index means. Pure functions over the API's JSON; the requests are
:mod:`.indexed`'s.

The Job is :func:`~.spec.render_job`'s with ``completionMode: Indexed``, ``completions`` =
the sweep's size, ``parallelism`` = its ``max_parallel`` (the Job controller runs at most that
many indexes at once and starts the next when one ends), ``backoffLimitPerIndex: 0`` (a variant
that fails is not retried and does not end the others) and ``backoffLimit`` = the size (each
index fails at most once, so this never ends the Job early; render_job's 0 would end every
variant at the first failure). Each pod reads its index from ``JOB_COMPLETION_INDEX``.
``backoffLimitPerIndex`` needs Kubernetes 1.29 or newer (beta and on by default there); an
older API server drops the field, which :func:`per_index_limit_kept` lets submit detect.

One index's state: the Job's ``status.completedIndexes`` / ``failedIndexes`` (``"0-2,5"``) are
the controller's verdict per index; before it, the index's newest pod (annotation
``batch.kubernetes.io/job-completion-index``) says why it waits or that it runs, as a plain
Job's pod does (:func:`~.status.pod_state`).

Cancelling one index. Kubernetes cannot stop one index of a Job except by deleting its pod, nor
keep an index that has no pod yet from getting one when a slot frees. So j2c:

1. records the index in the Job's annotation ``j2c.io/cancelled-indexes`` (every j2c process
   sees it), then deletes the index's pod if it has one (SIGTERM and the pod's grace period).
   With ``backoffLimitPerIndex: 0`` the controller marks that index failed and never retries
   it; a failed index that j2c cancelled reads as cancelled.
2. ends the whole Job (deletes it, its pods with it) as soon as every index still to run is
   a cancelled one (:func:`only_cancelled_left`): nothing is left that should start.
   Cancelling the parent cancels every variant in turn, so its last cancel deletes the Job.
   On the way, each running variant's deleted pod frees a slot that the controller may give
   to the next queued index, whose own cancel follows a moment later and deletes that pod
   (or the last cancel deletes it with the Job): normally before its container has started.
3. otherwise (one queued variant cancelled while others run), every read of the Job's state
   (at most twice a second for all its variants, whichever variant's status or log asks)
   deletes the pods of cancelled indexes it finds (:func:`pods_to_stop`), and ends the Job
   when only cancelled indexes are left. Such an index reads ``cancelling`` until it has
   settled, so its own watcher keeps reading, and so enforcing. A pod the controller creates
   for it is deleted at the next read: within about a second, usually before its container
   has started.

An index that ended before its cancel reached it keeps its outcome (succeeded or failed).
Once j2c has deleted the Job, its indexes read as its last state said (a cancelled one that
had not ended: cancelled). That last state is kept by the process that deleted the Job only: a
server restarted in between reads such an index as lost, as it does a plain Job gone.
"""

from __future__ import annotations

import re
from typing import Any

from j2c_server.config import J2CSettings
from j2c_server.core.errors import InvalidInput
from j2c_server.schedulers.base import JobSpec, SchedulerState
from j2c_server.schedulers.kubernetes.ranks import pod_rank, rank_pods
from j2c_server.schedulers.kubernetes.spec import render_job
from j2c_server.schedulers.kubernetes.status import (
    container_detail,
    current_pod,
    exit_code,
    failure_words,
    job_finished,
    pod_state,
    was_cancelled,
)
from j2c_server.wire.api import JobStatus

INDEX_ENV = "JOB_COMPLETION_INDEX"
ANNOTATION_CANCELLED_INDEXES = "j2c.io/cancelled-indexes"
_RANGE_RE = re.compile(r"^(\d+)(?:-(\d+))?$")
_GOING = ("Pending", "Running", "Unknown")


def task_handle_id(job: str, index: int) -> str:
    """``j2c-…/3``: index 3 of the Job named ``job``."""
    return f"{job}/{index}"


def parse_indexes(text: object) -> set[int]:
    """The indexes of ``"0-2,5"`` (the Job's completedIndexes / failedIndexes format)."""
    if not isinstance(text, str):
        return set()
    indexes: set[int] = set()
    for part in text.split(","):
        match = _RANGE_RE.match(part.strip())
        if match is not None:
            first = int(match.group(1))
            indexes.update(range(first, int(match.group(2) or first) + 1))
    return indexes


def format_indexes(indexes: set[int]) -> str:
    """``{0, 1, 2, 5}`` → ``"0-2,5"``."""
    parts: list[str] = []
    ordered = sorted(indexes)
    start = 0
    for i, index in enumerate(ordered):
        if i + 1 < len(ordered) and ordered[i + 1] == index + 1:
            continue
        first = ordered[start]
        parts.append(str(first) if first == index else f"{first}-{index}")
        start = i + 1
    return ",".join(parts)


def render_array(
    spec: JobSpec,
    settings: J2CSettings,
    size: int,
    max_parallel: int | None,
    *,
    namespace: str | None = None,
) -> dict[str, Any]:
    """The Indexed Job that runs ``spec`` as ``size`` variants, ``max_parallel`` at a time."""
    if spec.resources.nodes > 1:
        raise InvalidInput(
            "a Kubernetes Indexed Job runs one pod per variant; this sweep asks for "
            f"{spec.resources.nodes} nodes per variant (a multi-node job's index is its rank)",
            field="resources.nodes",
            hint="a sweep of multi-node variants runs as one Job per variant",
        )
    if size < 1:
        raise InvalidInput("sweep: an Indexed Job has at least one index", field="sweep")
    job = render_job(spec, settings, namespace=namespace)
    # One variant's disrupted pod fails its index only, as any failure of it does.
    job["spec"].pop("podFailurePolicy", None)
    job["spec"].update(
        completionMode="Indexed",
        completions=size,
        parallelism=min(max_parallel or size, size),
        backoffLimitPerIndex=0,
        backoffLimit=size,
    )
    return job


def per_index_limit_kept(job: dict[str, Any]) -> bool:
    """Whether the API server kept ``backoffLimitPerIndex`` (one older than 1.29 drops it, and
    its Job would retry failed variants and fail them all together)."""
    return (job.get("spec") or {}).get("backoffLimitPerIndex") is not None


def ended_indexes(job: dict[str, Any]) -> tuple[set[int], set[int]]:
    """(completed, failed) indexes, as the Job controller has recorded them."""
    status = job.get("status") or {}
    return parse_indexes(status.get("completedIndexes")), parse_indexes(status.get("failedIndexes"))


def cancelled_indexes(job: dict[str, Any]) -> set[int]:
    annotations = (job.get("metadata") or {}).get("annotations") or {}
    return parse_indexes(annotations.get(ANNOTATION_CANCELLED_INDEXES))


def _size(job: dict[str, Any]) -> int:
    return int((job.get("spec") or {}).get("completions") or 1)


def index_state(
    job: dict[str, Any], pods: list[dict[str, Any]], index: int, *, cancelled: bool
) -> SchedulerState:
    """Index ``index``'s status in an existing Job (``cancelled``: j2c was asked to cancel it)."""
    pod = current_pod(job, rank_pods(pods, index))
    code = exit_code(pod)
    completed, failed = ended_indexes(job)
    if index in completed:  # finished before a cancel could reach it: its outcome stays
        return SchedulerState(status=JobStatus.succeeded, exit_code=0 if code is None else code)
    if index in failed:
        if cancelled:
            return SchedulerState(
                status=JobStatus.cancelled, message="cancelled: its pod was deleted", exit_code=code
            )
        detail = container_detail(pod) if pod is not None else None
        words = f"index {index} of the Job failed" + (f": {detail}" if detail else "")
        return SchedulerState(status=JobStatus.failed, message=words, exit_code=code)
    if job_finished(job):  # the Job ended before this index did (e.g. its deadline passed)
        if cancelled or was_cancelled(job):
            return SchedulerState(status=JobStatus.cancelled, message="cancelled", exit_code=code)
        why = failure_words(job)
        message = "the Job ended before this variant did" + (f": {why}" if why else "")
        return SchedulerState(status=JobStatus.failed, message=message, exit_code=code)
    if cancelled or was_cancelled(job):
        message = (
            "cancelled before it started; a pod Kubernetes still creates for it is deleted"
            if pod is None
            else "cancelled: its pod is being deleted"
        )
        return SchedulerState(status=JobStatus.cancelling, message=message)
    if pod is None:
        if (job.get("spec") or {}).get("suspend"):
            return SchedulerState(
                status=JobStatus.queued, message="waiting for admission (the Job is suspended)"
            )
        parallelism = int((job.get("spec") or {}).get("parallelism") or 1)
        going = sum(1 for p in pods if p.get("status", {}).get("phase") in _GOING)
        if going >= parallelism:
            return SchedulerState(
                status=JobStatus.queued,
                message=f"waiting for a free slot: at most {parallelism} of the sweep's "
                f"{_size(job)} variants run at once",
            )
    return pod_state(pod)


def pods_to_stop(pods: list[dict[str, Any]], cancelled: set[int]) -> list[str]:
    """Names of the pods of cancelled indexes that still run or wait, and are not being
    deleted already."""
    return [
        pod["metadata"]["name"]
        for pod in pods
        if pod_rank(pod) in cancelled
        and pod.get("status", {}).get("phase", "Pending") in _GOING
        and not pod["metadata"].get("deletionTimestamp")
    ]


def only_cancelled_left(job: dict[str, Any], cancelled: set[int]) -> bool:
    """Whether every index the Job has still to run is a cancelled one (and there is one)."""
    completed, failed = ended_indexes(job)
    left = set(range(_size(job))) - completed - failed
    return bool(left) and left <= cancelled
