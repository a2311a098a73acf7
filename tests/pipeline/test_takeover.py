"""Watcher ownership: a job outlives the process that watches it, and its events stay exact.

A server restart is simulated by stopping the server's ``JobService`` without cancelling
anything and starting a fresh one on the same data dir; a CLI that exits hands the job to a
detached watcher process; a watcher killed with SIGKILL is replaced once its lease expires.
In every case each line the job printed is in the event log exactly once, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from pathlib import Path
from typing import Any

import psutil
import pytest

from j2c_server.config import load_settings
from j2c_server.jobs.drive import drivers as service_lifecycle
from j2c_server.jobs.journal import Journal
from j2c_server.jobs.service import JobService
from j2c_server.registry.db import REGISTRY_FILE, connect, write
from j2c_server.wire.api import Event, EventKind, JobRequest, JobStatus
from tests.support.jobs import TRAIN_PY, final_status, follow, log_lines, submit


def _lines(count: int) -> list[str]:
    return [f"line {i}" for i in range(count)]


async def _restart(jp_serverapp: Any) -> JobService:
    """Stop the server's job service (jobs go on) and start a new one on the same data dir."""
    settings = jp_serverapp.web_app.settings
    old: JobService = settings["j2c_service"]
    await old.stop()
    new = JobService(old.settings, root_dir=old.root_dir)
    settings["j2c_service"] = new
    new.start()
    return new


async def test_restarted_server_finishes_a_running_job_and_its_stream(
    jp_fetch: Any, jp_ws_fetch: Any, jp_serverapp: Any, project: Path
) -> None:
    record = await submit(jp_fetch, args=["--lines", "40", "--sleep", "0.05"])
    ws = await jp_ws_fetch("j2c", "api", "jobs", record.id, "stream")
    before: list[Event] = []
    while len(log_lines(before)) < 5:
        before.append(Event.model_validate_json(await ws.read_message()))
    service = await _restart(jp_serverapp)
    try:
        while (message := await ws.read_message()) is not None:
            before.append(Event.model_validate_json(message))
        assert ws.close_code == 4503  # "the server is stopping": the browser reconnects
        after = await follow(jp_ws_fetch, record.id, after=before[-1].seq)
    finally:
        await service.stop()
    events = before + after
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert log_lines(events)[1:] == _lines(40)
    assert final_status(events) == JobStatus.succeeded


async def test_restart_before_submission_resumes_the_pipeline(
    jp_fetch: Any, jp_ws_fetch: Any, jp_serverapp: Any, project: Path
) -> None:
    record = await submit(jp_fetch, args=["--lines", "3"])
    service = await _restart(jp_serverapp)
    try:
        events = await follow(jp_ws_fetch, record.id)
    finally:
        await service.stop()
    assert final_status(events) == JobStatus.succeeded
    assert log_lines(events)[1:] == _lines(3)
    submits = [e for e in events if e.kind == EventKind.stage and e.stage == "submit"]
    assert [e.state for e in submits] == ["started", "finished"]


@pytest.fixture
def cli_project(tmp_path: Path) -> Path:
    root = tmp_path / "cli-proj"
    root.mkdir()
    (root / "train.py").write_text(TRAIN_PY)
    return root


def _request(project: Path, *args: str) -> JobRequest:
    return JobRequest(code_path=str(project), call_path=str(project / "train.py"), args=list(args))


async def _until_lines(service: JobService, job_id: str, count: int) -> list[Event]:
    seen: list[Event] = []
    async for event in service.stream(job_id):
        seen.append(event)
        if len(log_lines(seen)) >= count:
            return seen
    return seen


async def test_detached_watcher_finishes_a_job_its_cli_left(
    j2c_data_dir: Path, cli_project: Path
) -> None:
    settings = load_settings()
    cli = JobService(settings)
    record = await cli.submit(_request(cli_project, "--lines", "40", "--sleep", "0.05"))
    before = await _until_lines(cli, record.id, 5)
    watcher_pid = cli.run_detached_watcher(record.id)
    await cli.stop()  # the CLI exits; its lease is released

    reader = JobService(settings)
    try:
        after = [e async for e in reader.stream(record.id, after=before[-1].seq)]
    finally:
        await reader.stop()
    events = before + after
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert log_lines(events)[1:] == _lines(40)
    assert final_status(events) == JobStatus.succeeded
    assert _exits(watcher_pid)


async def test_killed_watcher_is_replaced_after_its_lease_expires(
    j2c_data_dir: Path, cli_project: Path
) -> None:
    settings = load_settings()
    cli = JobService(settings)
    record = await cli.submit(_request(cli_project, "--lines", "300", "--sleep", "0.05"))
    before = await _until_lines(cli, record.id, 3)
    watcher_pid = cli.run_detached_watcher(record.id)
    await cli.stop()

    follower = JobService(settings)
    try:
        events = list(before)
        killed = False
        async for event in follower.stream(record.id, after=before[-1].seq):
            events.append(event)
            owner = await follower.registry.leases.owner(record.id) or ""
            if not killed and len(log_lines(events)) >= 20 and f":{watcher_pid}:" in owner:
                os.kill(watcher_pid, signal.SIGKILL)  # no goodbye: the lease must expire
                killed = True
    finally:
        await follower.stop()
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert log_lines(events)[1:] == _lines(300)
    assert final_status(events) == JobStatus.succeeded
    assert killed


def _exits(pid: int) -> bool:
    """The detached watcher ends by itself once the job is over (it is our child: reap it)."""
    with contextlib.suppress(psutil.NoSuchProcess):
        psutil.Process(pid).wait(timeout=20)
    return True


async def test_a_cancel_whose_process_died_before_the_scheduler_is_carried_out_by_the_next(
    j2c_data_dir: Path, cli_project: Path
) -> None:
    """Found by the chaos soak: the server recorded ``cancelling`` and was killed before it
    asked the scheduler; the server that took the job over marked it "cancelled before it was
    submitted" while the job ran on, orphaned. Now the next driver asks the scheduler again and
    records the end the scheduler reports."""
    settings = load_settings()
    first = JobService(settings)
    record = await first.submit(_request(cli_project, "--lines", "600", "--sleep", "0.05"))
    await _until_lines(first, record.id, 3)
    await first.stop()  # leaves the job running, its lease released
    second = JobService(settings)
    await Journal(second.registry, second.bus, record.id).status(
        JobStatus.cancelling, "cancel requested"
    )  # ... and nothing told the scheduler: that process is gone
    second.start()  # adopts the job nobody drives
    try:
        events = [e async for e in second.stream(record.id)]
    finally:
        await second.stop()
    assert final_status(events) == JobStatus.cancelled
    assert not any("before it was submitted" in e.model_dump_json() for e in events)
    assert len(log_lines(events)) < 600  # stopped, not run to its end
    run = j2c_data_dir / "runs" / record.id / "exit.json"
    assert json.loads(run.read_text())["cancelled"] is True


async def test_an_ended_job_whose_driver_died_before_its_usage_record_gets_one(
    j2c_data_dir: Path, cli_project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the chaos soak: a server killed between a job's end and its usage record left
    the job without one for ever (no process drives an ended job). Now the registry keeps
    ``accounted_at`` and the next service writes what is missing."""
    settings = load_settings()
    first = JobService(settings)
    record = await first.submit(_request(cli_project, "--lines", "2"))
    events = [e async for e in first.stream(record.id)]
    await first.stop()
    assert final_status(events) == JobStatus.succeeded
    (written,) = j2c_data_dir.rglob(f"usage/**/{record.id}.json")
    written.unlink()  # as if the driver had been killed before writing it
    conn = connect(j2c_data_dir / REGISTRY_FILE)
    with write(conn):
        conn.execute("UPDATE jobs SET accounted_at = NULL WHERE id = ?", (record.id,))

    monkeypatch.setattr(service_lifecycle, "ACCOUNT_GRACE_S", 0.0)
    second = JobService(settings)
    second.start()
    try:
        for _ in range(100):
            if list(j2c_data_dir.rglob(f"usage/**/{record.id}.json")):
                break
            await asyncio.sleep(0.1)
    finally:
        await second.stop()
    (again,) = j2c_data_dir.rglob(f"usage/**/{record.id}.json")
    assert json.loads(again.read_text())["status"] == "succeeded"
    (accounted,) = conn.execute(
        "SELECT accounted_at FROM jobs WHERE id = ?", (record.id,)
    ).fetchone()
    assert accounted is not None
