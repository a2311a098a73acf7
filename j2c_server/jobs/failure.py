"""Why a job failed, in one sentence its user acts on: the record's ``failure``, which every front
end shows first (the CLI and the magic at the top of what they print, the log panel above the
log).

Read from the job's own words, in this order:

1. j2c's last error line (``origin: j2c, level: error``: j2c-unpack's ``failed``, the notebook
   runner's, the Slurm script's rank line), with the ``hint`` line that follows it as what to
   do. These are written for the user already ("the notebook runner needs nbclient and
   ipykernel, and ... lacks them").
2. Else the last exception the job's own output shows (a Python traceback's last line,
   ``ZeroDivisionError: division by zero``): the entry raised it.
3. Else the exit code, and the job's last line.

A failure of j2c's pipeline before the job ran (packing, uploading, submitting) is its error's
message and hint (:func:`pipeline_failure`). Lines are read from the job's events, so the
origin decides what is j2c's (core/j2c_lines.py), never how a line starts.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Sequence
from pathlib import PurePath

from j2c_server.wire.api import Event, EventKind, JobFailure, JobRecord, LineLevel
from j2c_server.wire.event_frames import diary_text

# A traceback's last line: ``ValueError: bad``, ``numpy.linalg.LinAlgError: x``, ``SystemExit``.
_EXCEPTION = re.compile(
    r"^(?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Interrupt|Exit|Failure)(?:: .*)?$"
)
HINT_PHASE = "hint"
UPLOAD_PHASE = "uploading outputs"
OUTPUTS_EXIT = 73  # j2c-unpack's "the run succeeded, its outputs did not upload" (unpack/errors.py)
TRACEBACK_ACTION = "the traceback is in its output above this line"
EXIT_ACTION = "its last lines are in the log"


def job_failure(record: JobRecord, exit_code: int | None, events: Sequence[Event]) -> JobFailure:
    """Why the job (which ran, or was meant to) failed, from its last ``events``."""
    logs = [event for event in events if event.kind == EventKind.log]
    # An upload that failed after a failed run is not why the run failed.
    skip = () if exit_code == OUTPUTS_EXIT else (UPLOAD_PHASE,)
    ours = _j2c_error(logs, skip)
    if ours is not None:
        return ours
    entry = _entry(record)
    raised = _raised(logs)
    if raised is not None:
        return JobFailure(
            reason=f"{entry} raised {raised.text}",
            action=TRACEBACK_ACTION,
            line=_shown(raised),
            seq=raised.seq,
        )
    last = next((event for event in reversed(logs) if not event.is_j2c_line and event.text), None)
    return JobFailure(
        reason=f"{entry} {_ended(exit_code)}",
        action=EXIT_ACTION if last is not None else None,
        line=_shown(last) if last is not None else None,
        seq=last.seq if last is not None else None,
    )


def pipeline_failure(message: str, hint: str | None) -> JobFailure:
    """A failure of j2c's own stages before the job ran: its error's words."""
    return JobFailure(reason=message, action=hint)


def _j2c_error(logs: list[Event], skip: tuple[str, ...]) -> JobFailure | None:
    for index in range(len(logs) - 1, -1, -1):
        event = logs[index]
        if not event.is_j2c_line or event.level != LineLevel.error or event.phase in skip:
            continue
        after = logs[index + 1] if index + 1 < len(logs) else None
        hint = (
            after.text
            if after is not None and after.is_j2c_line and after.phase == HINT_PHASE
            else None
        )
        return JobFailure(
            reason=event.text or "j2c stopped the job",
            action=hint,
            line=diary_text(event.model_dump()),
            seq=event.seq,
        )
    return None


def _raised(logs: list[Event]) -> Event | None:
    """The job's last exception line (a traceback's last), if its output ends in one."""
    for event in reversed(logs):
        if event.is_j2c_line:
            continue
        text = (event.text or "").strip()
        if _EXCEPTION.match(text):
            return event.model_copy(update={"text": text})
    return None


def _shown(event: Event) -> str:
    """A job's line as its log shows it: a multi-node job's after its rank."""
    rank = event.data.get("rank")
    return f"[{rank}] {event.text}" if isinstance(rank, int) else event.text or ""


def _entry(record: JobRecord) -> str:
    """The entry point as the user names it: relative to the project when inside it."""
    call = record.request.call_path.strip()
    if not call:
        return record.name
    path, code = PurePath(call), PurePath(record.request.code_path)
    return path.relative_to(code).as_posix() if path.is_relative_to(code) else call


def _ended(exit_code: int | None) -> str:
    if exit_code is None:
        return "ended without an exit code"
    if exit_code > 128 or exit_code < 0:
        number = exit_code - 128 if exit_code > 128 else -exit_code
        try:
            name = signal.Signals(number).name
        except ValueError:
            return f"exited with code {exit_code}"
        return f"was stopped by {name} (exit code {exit_code})"
    return f"exited with code {exit_code}"
