"""What j2c says about a job by default, in the CLI and the magic alike: a few lines of its own
around the job's output, never its diary.

- one line when the job is sent (what went up, where it runs: :func:`sent_line`);
- its status changes after that (queued and why, running);
- j2c's own warnings and errors from the job (a shadowed package, a failed upload), with the
  hint that says what to do (:func:`shown_by_default`); every other line of j2c's (downloading,
  extracting, ...) only with ``--verbose``;
- how it ended (:func:`end_lines`): a failed job's reason in one sentence, what to do and the
  line it came from (the record's ``failure``, jobs/failure.py).

Whose a line is comes from the event (its ``origin``), never from how the line starts.
"""

from __future__ import annotations

from j2c_server.cli.render import StageBoard, amount
from j2c_server.wire.api import Event, JobFailure, JobStatus, LineLevel, Stage, StageState

HINT_PHASE = "hint"  # j2c-unpack's "what to do" after an error (unpack/log.py)
_SENT_STAGES = (Stage.scan, Stage.upload, Stage.submit)
_DONE = (StageState.finished, StageState.reused)


def shown_by_default(event: Event) -> bool:
    """Whether a log line is shown without ``--verbose``: the job's own, and j2c's warnings,
    errors and hints."""
    if not event.is_j2c_line:
        return True
    return event.level in (LineLevel.warning, LineLevel.error) or event.phase == HINT_PHASE


def sent_line(job_id: str, board: StageBoard) -> str:
    """The one line that says the job was sent: how long it took, what was found and uploaded,
    where it went (the scan, upload and submit stages' own words)."""
    seconds = sum(view.seconds or 0.0 for view in board.stages.values() if view.state in _DONE)
    said = []
    for stage in _SENT_STAGES:
        view = board.stages.get(stage)
        if view is None or view.state not in _DONE:
            continue
        if view.state == StageState.reused:
            said.append(f"{stage.value} reused")
        elif stage == Stage.scan and isinstance(view.data.get("files"), int):
            # Its counts: the scan's text also holds its warnings, said on lines of their own.
            size = amount(float(view.data.get("bytes") or 0), "bytes")
            said.append(f"{view.data['files']} files, {size}")
        elif view.text:
            said.append(view.text)
    what = f": {'; '.join(said)}" if said else ""
    return f"j2c: job {job_id} sent in {seconds:.1f} s{what}"


def failure_of(event: Event) -> JobFailure | None:
    """The failure a terminal status event carries (jobs/drive: its ``data.failure``)."""
    raw = event.data.get("failure")
    return JobFailure.model_validate(raw) if isinstance(raw, dict) else None


def failure_lines(job_id: str, failure: JobFailure, exit_code: object = None) -> list[str]:
    """A failed job's reason in one sentence, then what to do and the log line it came from."""
    said = exit_code is None or f"code {exit_code}" in failure.reason
    code = "" if said else f" (exit code {exit_code})"
    lines = [f"j2c: job {job_id} failed{code}: {failure.reason}"]
    if failure.action:
        lines.append(f"j2c:   what to do: {failure.action}")
    if failure.line and failure.line not in failure.reason and failure.reason not in failure.line:
        where = f" (event {failure.seq})" if failure.seq is not None else ""
        lines.append(f"j2c:   from the log{where}: {failure.line}")
    return lines


def end_lines(
    job_id: str, event: Event, *, output_uri: str | None = None, told: bool = False
) -> list[str]:
    """How the job ended (its terminal status event): a line, or a failed job's reason block
    (``told``: the reason was shown already, at the top)."""
    failure = failure_of(event)
    exit_code = event.data.get("exit_code")
    if event.status == JobStatus.failed and failure is not None and not told:
        return failure_lines(job_id, failure, exit_code)
    status = event.status.value if event.status else "?"
    detail = f" (exit code {exit_code})" if exit_code is not None else ""
    message = f": {event.text}" if event.text else ""
    outputs = (
        f"; outputs: {output_uri}" if output_uri and event.status == JobStatus.succeeded else ""
    )
    return [f"j2c: job {job_id} {status}{detail}{message}{outputs}"]


def progress_text(board: StageBoard, phase: str | None) -> str:
    """What the job is doing now, in a few words (the live line on a TTY, the magic's display):
    the running stage's bar while it is sent, then its status (and j2c's phase in the job)."""
    started = [board.stages[s] for s in Stage if s in board.stages]
    running = [view for view in started if view.state == StageState.started]
    if running and board.status not in (JobStatus.queued, JobStatus.running):
        return running[-1].progress()
    status = board.status.value if board.status is not None else "pending"
    if board.attempt:  # a resumed job: "running, attempt 2 of 4"
        status = f"{status}, {board.attempt}"
    message = f": {board.message}" if board.message else ""
    starting = phase and phase != "running" and board.status == JobStatus.running
    doing = f" ({phase})" if starting else ""
    return f"{status}{message}{doing}"
