"""Slurm's job record (``GET /job/{id}``, API v0.0.38) read as a j2c :class:`SchedulerState`.

A pending job's reason is put in words ("waiting for GPUs (Resources)"), and its place in its
partition's queue counted (:func:`jobs_ahead`). The exit code in the
record is a raw wait status: a job killed by signal N reads as exit code 128+N, as a shell shows
it. A job j2c was asked to cancel (its comment carries the cancel mark) reads as cancelled
however it ended, unless it completed successfully first.

**Interrupted** (a new attempt may resume the job, docs/pipeline.md): Slurm's own verdict.
``PREEMPTED`` (a higher-priority job took its resources in a partition with ``PreemptMode``
CANCEL, or REQUEUE for jobs j2c submits, which are not requeueable: j2c resumes them itself,
with their checkpoint), ``NODE_FAIL`` (its node stopped responding or was set down) and
``BOOT_FAIL`` (its node never booted) are not the job's doing; ``FAILED``, ``TIMEOUT``,
``OUT_OF_MEMORY`` and ``CANCELLED`` are. A job Slurm requeued (``restart_cnt`` above 0 while it
is queued or running again: its node failed, it was preempted in REQUEUE mode, or ``scontrol
requeue``) reads as lost and interrupted: Slurm would run it again from its start, j2c resumes
it from its checkpoint instead (the requeued job is cancelled). slurmrestd v0.0.38 ignores the
``requeue: false`` j2c submits with, so every job is requeueable where ``JobRequeue=1`` (the
default).
"""

from __future__ import annotations

import signal
from collections.abc import Iterable
from typing import Any

from j2c_server.core.units import count, timed_out
from j2c_server.schedulers.base import SchedulerState
from j2c_server.schedulers.slurm.job import CANCEL_MARK
from j2c_server.wire.api import JobStatus

_QUEUED = {
    "PENDING",
    "CONFIGURING",
    "REQUEUED",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "RESV_DEL_HOLD",
    "POWER_UP_NODE",
}
_RUNNING = {"RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "RESIZING"}
_FAILED = {
    "FAILED": "failed",
    "TIMEOUT": "timed out (its time limit)",
    "OUT_OF_MEMORY": "ran out of memory",
    "NODE_FAIL": "lost its node (node failure)",
    "BOOT_FAIL": "could not boot its node",
    "DEADLINE": "missed its deadline",
    "PREEMPTED": "was preempted",
    "SPECIAL_EXIT": "ended in Slurm's special-exit state",
}
_CANCELLED = {"CANCELLED", "REVOKED"}
_INTERRUPTED = {
    "PREEMPTED": "preempted (Slurm state PREEMPTED)",
    "NODE_FAIL": "its node failed (Slurm state NODE_FAIL)",
    "BOOT_FAIL": "its node did not boot (Slurm state BOOT_FAIL)",
}

_REASONS = {
    "None": "waiting to be scheduled",
    "Priority": "waiting behind jobs with higher priority",
    "Dependency": "waiting for the jobs it depends on",
    "DependencyNeverSatisfied": "blocked: a job it depends on failed",
    "BeginTime": "waiting for its start time",
    "JobHeldUser": "held by its user",
    "JobHeldAdmin": "held by an administrator",
    "ReqNodeNotAvail": "waiting: the nodes it needs are unavailable",
    "PartitionDown": "waiting: its partition is down",
    "PartitionInactive": "waiting: its partition is inactive",
    "PartitionConfig": "blocked: it asks for more than its partition allows",
    "PartitionNodeLimit": "blocked: it asks for more nodes than its partition allows",
    "PartitionTimeLimit": "blocked: its time limit exceeds the partition's",
    "Reservation": "waiting for its reservation",
    "NodeDown": "waiting: a node it needs is down",
    "Licenses": "waiting for licenses",
    "Cleaning": "waiting for a node to finish cleaning up",
    "launch_failed_requeued_held": "held after a failed launch",
}


def _pending_message(reason: str, job: dict[str, Any]) -> str:
    if reason == "Resources":
        wants_gpus = "gpu" in str(job.get("tres_per_node") or job.get("tres_req_str") or "")
        words = "waiting for GPUs" if wants_gpus else "waiting for free resources"
    elif reason in _REASONS:
        words = _REASONS[reason]
    elif reason.startswith(("QOS", "Assoc", "MaxCpu", "MaxGRES", "MaxMem", "MaxNode")):
        words = "waiting: a usage limit of its account or QOS is reached"
    else:
        words = "waiting in the queue"
    return f"{words} ({reason})" if reason != "None" else words


def exit_code(job: dict[str, Any]) -> int | None:
    raw = job.get("exit_code")
    if not isinstance(raw, int):
        return None
    signum = raw & 0x7F
    return 128 + signum if signum else (raw >> 8) & 0xFF


def _ending(code: int | None) -> str:
    if code is None:
        return ""
    if code > 128:
        try:
            return f" (killed by {signal.Signals(code - 128).name})"
        except ValueError:
            return f" (exit code {code})"
    return f" (exit code {code})"


def job_state(job: dict[str, Any]) -> SchedulerState:
    state = str(job.get("job_state") or "UNKNOWN")
    reason = str(job.get("state_reason") or "None")
    job_id = job.get("job_id")
    restarts = job.get("restart_cnt")
    if isinstance(restarts, int) and restarts > 0 and (state in _QUEUED or state in _RUNNING):
        return SchedulerState(
            status=JobStatus.lost,
            message=f"Slurm requeued job {job_id} to run it again from its start "
            f"(restart {restarts}; {state}, {reason})",
            interrupted="requeued by Slurm (its node failed, or it was preempted or requeued)",
            node=str(job.get("batch_host") or job.get("nodes") or "") or None,
        )
    if state in _QUEUED:
        return SchedulerState(status=JobStatus.queued, message=_pending_message(reason, job))
    if state in _RUNNING:
        message = None if state == "RUNNING" else f"Slurm state {state}"
        return SchedulerState(status=JobStatus.running, message=message)
    code = exit_code(job)
    comment = str(job.get("comment") or "")
    if state == "COMPLETED":
        return SchedulerState(status=JobStatus.succeeded, exit_code=code)
    if state in _CANCELLED or CANCEL_MARK in comment.split():
        who = "by j2c" if CANCEL_MARK in comment.split() else "in Slurm"
        return SchedulerState(
            status=JobStatus.cancelled,
            message=f"Slurm job {job_id} was cancelled {who}{_ending(code)}",
            exit_code=code,
        )
    if state in _FAILED:
        what = _FAILED[state]
        if state == "TIMEOUT" and isinstance(job.get("time_limit"), int):
            what = timed_out(job["time_limit"])  # the one wording of every backend
        detail = f"; {job['state_description']}" if job.get("state_description") else ""
        nodes = job.get("nodes") or job.get("batch_host")
        return SchedulerState(
            status=JobStatus.failed,
            message=f"Slurm job {job_id} {what}{_ending(code)}{detail}",
            exit_code=code,
            interrupted=_INTERRUPTED.get(state),
            node=str(nodes) if nodes else None,
        )
    return SchedulerState(status=JobStatus.running, message=f"Slurm state {state}")


# --------------------------------------------------------------------------- place in the queue


def _number(value: Any) -> float | None:
    """A number in either of slurmrestd's shapes: ``5``, or ``{"set": true, "number": 5}``."""
    if isinstance(value, dict):
        value = value.get("number") if value.get("set", True) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _pending(job: dict[str, Any]) -> bool:
    state = job.get("job_state")
    return "PENDING" in (state if isinstance(state, list) else [state])


def _order(job: dict[str, Any]) -> tuple[float, float, int] | None:
    """Where Slurm's main scheduler takes a pending job: by priority, highest first, then by
    submission (the job id breaks ties)."""
    priority = _number(job.get("priority"))
    if priority is None:
        return None
    return (-priority, _number(job.get("submit_time")) or 0.0, int(job.get("job_id") or 0))


def jobs_ahead(job: dict[str, Any], jobs: Iterable[dict[str, Any]]) -> int | None:
    """How many pending jobs of its partition Slurm considers before ``job``; None when it is
    not pending or Slurm shows no priority. Backfill may still start a smaller job sooner: the
    count is the queue's order, not a promise."""
    mine = _order(job)
    if mine is None or not _pending(job):
        return None
    return sum(
        1
        for other in jobs
        if other.get("job_id") != job.get("job_id")
        and other.get("partition") == job.get("partition")
        and _pending(other)
        and (theirs := _order(other)) is not None
        and theirs < mine
    )


def place_words(ahead: int, partition: str) -> str:
    """ "next in partition gpu" / "2 jobs ahead in partition gpu"."""
    where = f"in partition {partition}" if partition else "in the queue"
    return f"next {where}" if ahead == 0 else f"{count(ahead, 'job')} ahead {where}"
