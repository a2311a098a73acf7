"""A container job's state as j2c reads it: the engine's container state as a j2c status (with
the cancel marker and the time limit, :mod:`.lifecycle`), and its results: the exit
code and the files of the job's ``$J2C_OUTPUT_DIR`` (a host folder).

**Interrupted** (a new attempt may resume the job, docs/pipeline.md): the container was killed
or stopped from outside, not ended by its job. ``j2c-unpack`` writes its end record
(``$J2C_UNPACK_END_FILE``: :data:`END_FILE` in the job's outputs folder on the host, which the
server can read whatever the job's uid; never listed as an output) as the last thing it does,
after its last upload, with the signals it was sent. A failed container without that record was
killed (``podman kill``, an engine or machine going down: exit code 137); one whose j2c-unpack
was sent SIGTERM that j2c did not send (no cancel marker, not past its time limit) was stopped
from outside (``podman stop``, an engine restart). A container the engine no longer has, with no
cancel and no collected state, vanished (lost). Its own failures (the job's exit code, an
out-of-memory kill by its memory limit, j2c-unpack's own exit codes) are not interruptions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from j2c_server.core.units import timed_out
from j2c_server.schedulers.base import SchedulerState
from j2c_server.wire.api import Artifact, JobResults, JobStatus

CANCELLED = "cancelled"  # the marker a cancel leaves in the job's folder
END_FILE = ".j2c-unpack-end.json"  # in the job's outputs folder: j2c-unpack's end record
FINISHED = ("exited", "stopped", "dead")
_MAX_ARTIFACTS = 1000


def state_of(info: dict[str, Any]) -> str:
    """The engine's state of the container (``created``, ``running``, ``exited``...)."""
    return str((info.get("State") or {}).get("Status") or "").lower()


def interruption(info: dict[str, Any], end: dict[str, Any] | None) -> str | None:
    """Why a container that failed was not ended by its job (None: it was), from its
    j2c-unpack's end record (``end``; None: it left none)."""
    state = info.get("State") or {}
    if state.get("OOMKilled"):
        return None  # its own memory limit: the job's to fix
    if end is None:
        return f"its container was killed (exit code {state.get('ExitCode')}) without a cancel"
    signals = [str(name) for name in end.get("signals") or []]
    if signals:
        return f"its container was stopped from outside j2c ({', '.join(signals)})"
    return None


def container_state(
    info: dict[str, Any],
    *,
    cancelled: bool,
    timed_out_s: float | None = None,
    end: dict[str, Any] | None = None,
    judge_end: bool = False,
) -> SchedulerState:
    """``judge_end``: tell a kill from the job's own end by ``end``, j2c-unpack's end record
    (:func:`interruption`)."""
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
    interrupted = interruption(info, end) if judge_end else None
    return SchedulerState(
        status=JobStatus.failed, message=message, exit_code=code, interrupted=interrupted
    )


def mark_cancelled(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CANCELLED).touch()


def collect_results(outputs: Path, code: int | None) -> JobResults:
    files = (
        sorted(p for p in outputs.rglob("*") if p.is_file() and p.name != END_FILE)
        if outputs.is_dir()
        else []
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


def read_end(outputs: Path) -> dict[str, Any] | None:
    """j2c-unpack's end record in the job's outputs folder (None: there is none)."""
    try:
        data = json.loads((outputs / END_FILE).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        # Unreadable, or not whole: j2c-unpack did reach its end.
        return {"j2c_unpack": "summary", "signals": []}
    return data if isinstance(data, dict) else {"j2c_unpack": "summary", "signals": []}
