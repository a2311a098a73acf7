"""The stage board and the terminal renderer, fed real Event models."""

from __future__ import annotations

import io
import time

from j2c_server.cli.render import StageBoard, TerminalRenderer, exit_code_of
from j2c_server.wire.api import Event, EventKind, JobRecord, JobRequest, JobStatus, Stage

_seq = iter(range(1, 10_000))


def event(kind: EventKind, **fields: object) -> Event:
    return Event.model_validate(
        {"job_id": "j1", "seq": next(_seq), "time": time.time(), "kind": kind, **fields}
    )


def record(status: JobStatus, exit_code: int | None) -> JobRecord:
    request = JobRequest(code_path="/p", call_path="/p/t.py")
    return JobRecord(
        id="j1",
        name="t",
        key="k",
        status=status,
        request=request,
        scheduler="local",
        created_at=0,
        updated_at=0,
        exit_code=exit_code,
    )


def test_board_shows_a_bar_with_bytes_while_a_stage_runs() -> None:
    board = StageBoard()
    board.apply(event(EventKind.stage, stage=Stage.pack, state="started", text="packing"))
    board.apply(
        event(
            EventKind.progress, stage=Stage.pack, data={"bytes": 500_000, "total_bytes": 1_000_000}
        )
    )
    (line,) = board.lines()
    assert line.startswith("pack")
    assert "50%" in line
    assert "500.0 kB/1.0 MB" in line


def test_board_shows_why_a_stage_was_reused() -> None:
    board = StageBoard()
    board.apply(
        event(EventKind.stage, stage=Stage.upload, state="reused", text="already in the store")
    )
    assert board.lines() == ["upload    reused  already in the store"]


def test_board_lists_stages_in_pipeline_order() -> None:
    board = StageBoard()
    for stage in (Stage.upload, Stage.scan, Stage.pack):
        board.apply(event(EventKind.stage, stage=stage, state="finished"))
    assert [line.split()[0] for line in board.lines()] == ["scan", "pack", "upload"]


def test_plain_renderer_sends_job_output_to_stdout_and_own_lines_to_stderr() -> None:
    out, err = io.StringIO(), io.StringIO()
    renderer = TerminalRenderer("j1", tty=False, out=out, err=err)
    renderer.handle(
        event(EventKind.stage, stage=Stage.pack, state="finished", data={"seconds": 1.5})
    )
    renderer.handle(event(EventKind.log, stream="stdout", text="epoch 1"))
    renderer.handle(event(EventKind.log, stream="stderr", text="warning"))
    renderer.handle(event(EventKind.status, status=JobStatus.succeeded, data={"exit_code": 0}))
    assert out.getvalue() == "epoch 1\n"
    assert err.getvalue().splitlines() == [
        "j2c: pack      finished 1.5s",
        "warning",
        "j2c: job j1 succeeded (exit code 0)",
    ]


def test_plain_renderer_never_writes_escape_codes() -> None:
    err = io.StringIO()
    renderer = TerminalRenderer("j1", tty=False, out=io.StringIO(), err=err)
    renderer.handle(event(EventKind.stage, stage=Stage.pack, state="started"))
    renderer.handle(
        event(EventKind.progress, stage=Stage.pack, data={"bytes": 1, "total_bytes": 2})
    )
    assert "\x1b" not in err.getvalue()


def test_tty_renderer_redraws_the_board_in_place() -> None:
    err = io.StringIO()
    renderer = TerminalRenderer("j1", tty=True, out=io.StringIO(), err=err)
    renderer.handle(event(EventKind.stage, stage=Stage.scan, state="started"))
    renderer.handle(event(EventKind.stage, stage=Stage.scan, state="finished"))
    assert "\x1b[1F" in err.getvalue()  # moved up over the first drawing


def test_exit_code_mirrors_the_job() -> None:
    assert exit_code_of(record(JobStatus.failed, 3)) == 3
    assert exit_code_of(record(JobStatus.succeeded, 0)) == 0


def test_signal_exit_reads_as_128_plus_signal() -> None:
    assert exit_code_of(record(JobStatus.cancelled, -15)) == 143


def test_failure_without_exit_code_is_1() -> None:
    assert exit_code_of(record(JobStatus.failed, None)) == 1


def test_plain_renderer_tells_queued_and_running_but_not_the_pipelines_own_statuses() -> None:
    err = io.StringIO()
    renderer = TerminalRenderer("j1", tty=False, out=io.StringIO(), err=err)
    for status in (JobStatus.packing, JobStatus.queued, JobStatus.running):
        renderer.handle(event(EventKind.status, status=status, text=None))
    assert err.getvalue().splitlines() == ["j2c: job j1 queued", "j2c: job j1 running"]


def test_board_says_which_attempt_runs_once_a_boundary_line_came() -> None:
    """The live view of `j2c submit` and the magic: 'attempt 2 of 4' after a preemption."""
    board = StageBoard()
    board.apply(event(EventKind.log, stream="stdout", text="step 3"))
    assert board.attempt is None  # a job that ran once says nothing of attempts
    boundary = {"attempt": {"ended": 1, "next": 2, "of": 4, "reason": "preempted"}}
    board.apply(
        event(EventKind.log, stream="stderr", text="j2c: attempt 1 of 4 ended", data=boundary)
    )
    assert board.attempt == "attempt 2 of 4"
