"""A container job's state as j2c reads it: the engine's container state as a j2c status (with
the cancel marker and the time limit, :mod:`.lifecycle`), and its results: the exit
code and the files of the job's ``$J2C_OUTPUT_DIR`` (a host folder)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from j2c_server.core.units import timed_out
from j2c_server.schedulers.base import SchedulerState
from j2c_server.wire.api import Artifact, JobResults, JobStatus

CANCELLED = "cancelled"  # the marker a cancel leaves in the job's folder
FINISHED = ("exited", "stopped", "dead")
_MAX_ARTIFACTS = 1000


def state_of(info: dict[str, Any]) -> str:
    """The engine's state of the container (``created``, ``running``, ``exited``...)."""
    return str((info.get("State") or {}).get("Status") or "").lower()


def container_state(
    info: dict[str, Any], *, cancelled: bool, timed_out_s: float | None = None
) -> SchedulerState:
    state = info.get("State") or {}
    status = state_of(info)
    if status in ("created", "configured"):
        return SchedulerState(status=JobStatus.submitted, message="starting")
    if status not in FINISHED:
        if cancelled:
            return SchedulerState(status=JobStatus.cancelling, message="stopping the container")
        if timed_out_s is not None:
            message = f"{timed_out(timed_out_s / 60)}: stopping"
            return SchedulerState(status=JobStatus.running, message=message)
        return SchedulerState(status=JobStatus.running)
    code = state.get("ExitCode")
    if cancelled:
        return SchedulerState(status=JobStatus.cancelled, message="cancelled", exit_code=code)
    if timed_out_s is not None:
        # As the other backends report a time limit: failed, with why (no status of its own).
        message = f"{timed_out(timed_out_s / 60)} (stopped: exit code {code})"
        return SchedulerState(status=JobStatus.failed, message=message, exit_code=code)
    if code == 0:
        return SchedulerState(status=JobStatus.succeeded, exit_code=0)
    message = f"exit code {code}"
    if state.get("OOMKilled"):
        message = f"out of memory (the container's memory limit): {message}"
    elif state.get("Error"):
        message = f"{state['Error']}: {message}"
    return SchedulerState(status=JobStatus.failed, message=message, exit_code=code)


def mark_cancelled(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CANCELLED).touch()


def collect_results(outputs: Path, code: int | None) -> JobResults:
    files = (
        sorted(path for path in outputs.rglob("*") if path.is_file()) if outputs.is_dir() else []
    )
    artifacts = [
        Artifact(name=p.relative_to(outputs).as_posix(), size=p.stat().st_size, url=p.as_uri())
        for p in files[:_MAX_ARTIFACTS]
    ]
    notebooks = [p for p in files if p.parent == outputs and p.suffix == ".ipynb"]
    notebook = max(notebooks, key=lambda p: p.stat().st_mtime, default=None)
    return JobResults(
        exit_code=code,
        artifacts=artifacts,
        executed_notebook=notebook.as_uri() if notebook else None,
        output_uri=outputs.as_uri(),
    )
