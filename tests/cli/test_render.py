"""The stage board and the terminal renderer, fed real Event models."""

from __future__ import annotations

import io
import time

from j2c_server.cli.render import StageBoard, exit_code_of
from j2c_server.cli.terminal import TerminalRenderer
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


def test_the_diary_sends_job_output_to_stdout_and_own_lines_to_stderr() -> None:
    out, err = io.StringIO(), io.StringIO()
    renderer = TerminalRenderer("j1", tty=False, out=out, err=err, verbose=True)
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


def test_the_tty_diary_redraws_the_board_in_place() -> None:
    err = io.StringIO()
    renderer = TerminalRenderer("j1", tty=True, out=io.StringIO(), err=err, verbose=True)
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
        event(
            EventKind.log,
            origin="j2c",
            level="warning",
            phase="resume",
            text="attempt 1 of 4 ended: preempted",
            data=boundary,
        )
    )
    assert board.attempt == "attempt 2 of 4"


def _job_events(*, failed: bool = False) -> list[Event]:
    """A job's events as a local job sends them: stages, statuses, j2c's diary in the job
    around the job's lines (one of which looks like j2c's), its end."""
    j2c = {"origin": "j2c", "level": "info"}
    events = [
        event(EventKind.status, status=JobStatus.packing, text="packing the project"),
        event(EventKind.stage, stage=Stage.scan, state="started"),
        event(EventKind.stage, stage=Stage.scan, state="finished", text="3 files, 1.0 kB"),
        event(EventKind.stage, stage=Stage.upload, state="reused", text="already stored"),
        event(EventKind.stage, stage=Stage.submit, state="started"),
        event(EventKind.stage, stage=Stage.submit, state="finished", text="submitted to local"),
        event(EventKind.status, status=JobStatus.running),
        *[
            event(EventKind.log, phase=phase, text=f"{phase} things", **j2c)
            for phase in ("manifest", "placing", "downloading", "extracting", "running")
        ],
        event(EventKind.log, text="epoch 1"),
        event(EventKind.log, text="j2c: running: printed by the user"),
        event(EventKind.log, origin="j2c", level="warning", phase="python", text="shadowed"),
        event(EventKind.log, phase="summary", text="{}", **j2c),
    ]
    if failed:
        failure = {"reason": "train.py raised ValueError: bad", "action": "look", "seq": 3}
        events.append(event(EventKind.status, status=JobStatus.failed, data={"failure": failure}))
    else:
        events.append(event(EventKind.result, data={"output_uri": "file:///o"}))
        events.append(event(EventKind.status, status=JobStatus.succeeded, text="exit code 0"))
    return events


def _render(events: list[Event], **options: bool) -> tuple[list[str], list[str]]:
    out, err = io.StringIO(), io.StringIO()
    renderer = TerminalRenderer("j1", tty=False, out=out, err=err, **options)
    for each in events:
        renderer.handle(each)
    renderer.close()
    return out.getvalue().splitlines(), err.getvalue().splitlines()


def test_by_default_a_succeeded_job_gets_a_few_lines_of_j2cs_around_its_own() -> None:
    out, err = _render(_job_events())
    assert out == ["epoch 1", "j2c: running: printed by the user"]  # the user's, as printed
    assert err == [
        "j2c: job j1 sent in 0.0 s: 3 files, 1.0 kB; upload reused; submitted to local",
        "j2c: job j1 running",
        "j2c: python: shadowed",  # j2c's warnings are shown
        "j2c: job j1 succeeded: exit code 0; outputs: file:///o",
    ]


def test_verbose_is_the_diary_with_every_line_of_j2cs() -> None:
    out, err = _render(_job_events(), verbose=True)
    assert out == ["epoch 1", "j2c: running: printed by the user"]
    for phase in ("manifest", "placing", "downloading", "extracting", "running", "summary"):
        assert any(line.startswith(f"j2c: {phase}: ") for line in err), phase
    assert "j2c: scan      finished 0.0s  3 files, 1.0 kB" in err


def test_a_failed_job_ends_with_its_reason_what_to_do_and_the_line() -> None:
    _, err = _render(_job_events(failed=True))
    assert err[-2:] == [
        "j2c: job j1 failed: train.py raised ValueError: bad",
        "j2c:   what to do: look",
    ]


def test_the_tty_line_is_rewritten_in_place_until_the_jobs_output_starts() -> None:
    out, err = io.StringIO(), io.StringIO()
    renderer = TerminalRenderer("j1", tty=True, out=out, err=err)
    for each in _job_events():
        renderer.handle(each)
    written = err.getvalue()
    before_output, _, after = written.partition("j2c: python: shadowed")
    assert "\r\x1b[2Kj2c: job j1 running (extracting)" in before_output  # j2c's phase, live
    assert "\x1b" not in after  # plain lines once the output started
    assert out.getvalue().splitlines() == ["epoch 1", "j2c: running: printed by the user"]
