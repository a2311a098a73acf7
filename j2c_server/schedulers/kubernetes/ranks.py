"""A multi-node (Indexed) Job's pods read as one j2c job: which pod is which rank, the status
of the whole (running while any rank runs), and its exit code (the first rank that failed).

Pure functions over the API's JSON, like :mod:`.status`, which decides the terminal states
from the Job's conditions; this module only speaks for the ranks while the Job runs.
"""

from __future__ import annotations

from typing import Any

from j2c_server.schedulers.base import SchedulerState
from j2c_server.schedulers.kubernetes.status import (
    container_status,
    current_pod,
    exit_code,
    job_state,
)
from j2c_server.wire.api import JobStatus

INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"


def pod_rank(pod: dict[str, Any]) -> int | None:
    annotations = pod.get("metadata", {}).get("annotations") or {}
    raw = str(annotations.get(INDEX_ANNOTATION, ""))
    return int(raw) if raw.isdigit() else None


def rank_pods(pods: list[dict[str, Any]], rank: int) -> list[dict[str, Any]]:
    return [pod for pod in pods if pod_rank(pod) == rank]


def first_failed_code(pods: list[dict[str, Any]]) -> tuple[int, int] | None:
    """(rank, exit code) of the pod that failed first (by when its container ended)."""
    failed = []
    for pod in pods:
        code, rank = exit_code(pod), pod_rank(pod)
        if code and rank is not None:
            ended = (container_status(pod).get("state") or {}).get("terminated", {})
            failed.append((str(ended.get("finishedAt", "")), rank, code))
    if not failed:
        return None
    _, rank, code = min(failed)
    return rank, code


def ranked_state(job: dict[str, Any], pods: list[dict[str, Any]], nodes: int) -> SchedulerState:
    """The whole job's status: terminal as the Job says; else running while any rank's pod
    runs, else what the first rank still waiting waits for."""
    state = job_state(job, pods)
    failed = first_failed_code(pods)
    if state.status.terminal:
        if failed is None:
            return state
        rank, code = failed
        words = f"rank {rank} failed" + (f": {state.message}" if state.message else "")
        return state.model_copy(update={"exit_code": code, "message": words})
    if state.status == JobStatus.cancelling:
        return state
    newest = [current_pod(job, rank_pods(pods, rank)) for rank in range(nodes)]
    running = [pod for pod in newest if pod and pod.get("status", {}).get("phase") == "Running"]
    if running:
        message = None if len(running) == nodes else f"{len(running)} of {nodes} ranks running"
        return SchedulerState(status=JobStatus.running, message=message)
    waiting = next((pod for pod in newest if pod is not None), None)
    if waiting is None:
        return state
    return job_state(job, [waiting])
