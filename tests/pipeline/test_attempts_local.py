"""Attempts on the local backend: a job whose runner is killed resumes from its last synced
checkpoint as a new attempt of the same job; a cancel, the user's code failing and a job out of
attempts do not.

Real jobs (``j2c-unpack`` under the local supervisor) on a ``file://`` store; the runner is
killed as a lost machine would end it: SIGKILL to ``j2c-unpack`` (its job dies with it).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import pytest

from j2c_server.cli.commands import describe
from j2c_server.config import J2CSettings, load_settings
from j2c_server.jobs.service import JobService
from j2c_server.storage import open_store
from j2c_server.usage.report import load_records
from j2c_server.wire.api import EventKind, JobRecord, JobRequest, JobStatus
from j2c_server.wire.event_frames import diary_text
from tests.support.jobs import settle
from tests.support.resumable import last_step, starts, write_resumable

STEPS = 30
PAUSE_S = 0.2


@pytest.fixture
def resumable(tmp_path: Path) -> Path:
    project = tmp_path / "proj"
    write_resumable(project)
    settle(project)
    return project


def _settings(data: Path, **resume: object) -> J2CSettings:
    return load_settings(
        overrides={
            "data_dir": str(data),
            "resume": {"sync_every_s": 1, "backoff_s": 0.2, **resume},
        }
    )


def _request(project: Path, **fields: object) -> JobRequest:
    return JobRequest.model_validate(
        {
            "code_path": str(project),
            "call_path": str(project / "resumable.py"),
            "args": [str(STEPS), str(PAUSE_S)],
            **fields,
        }
    )


async def _lines(service: JobService, job_id: str) -> list[str]:
    """The job's log as the diary shows it (j2c's lines as ``j2c: <phase>: text``)."""
    return [
        diary_text(e.model_dump(mode="json"))
        for e in await service.events(job_id)
        if e.kind == EventKind.log
    ]


async def _until(service: JobService, job_id: str, seen: str, timeout_s: float = 60) -> None:
    async with asyncio.timeout(timeout_s):
        while not any(seen in line for line in await _lines(service, job_id)):
            await asyncio.sleep(0.1)


def _kill_runner(data: Path, record: JobRecord) -> None:
    """SIGKILL to the attempt's j2c-unpack (the supervisor sees it die of a signal)."""
    assert record.handle is not None
    job = json.loads((Path(record.handle.data["run_dir"]) / "job.json").read_text())
    os.kill(job["child"]["pid"], signal.SIGKILL)


async def _run_and_kill(
    settings: J2CSettings, request: JobRequest, kills: int, timeout_s: float = 120
) -> tuple[JobRecord, list[str], float]:
    """Send the job, kill its runner once a checkpoint after step 3 is synced (``kills``
    times, each attempt), wait for its end; its record, log and the seconds from the last kill
    to the resumed attempt's first step."""
    service = JobService(settings)
    service.start()
    try:
        record = await service.submit(request)
        killed_at = 0.0
        for attempt in range(1, kills + 1):
            await _until(service, record.id, f"attempt {attempt} starts at step")
            await _until(service, record.id, "j2c: checkpoints: synced")
            await _until(service, record.id, f"step {3 + 5 * attempt}")
            await _until(service, record.id, "j2c: checkpoints: synced")
            current = await service.get(record.id)
            _kill_runner(settings.data_path(), current)
            killed_at = time.monotonic()
        await _until(service, record.id, f"attempt {kills + 1} starts at step", timeout_s)
        resumed_after = time.monotonic() - killed_at
        async with asyncio.timeout(timeout_s):
            final = await service.wait(record.id)
        lines = await _lines(service, record.id)
    finally:
        await service.stop()
    return final, lines, resumed_after


async def test_a_killed_runner_resumes_from_its_last_checkpoint_as_one_job(
    tmp_path: Path, resumable: Path
) -> None:
    data = tmp_path / "data"
    settings = _settings(data)
    final, lines, resumed_after = await _run_and_kill(settings, _request(resumable), kills=1)
    assert final.status == JobStatus.succeeded, lines[-20:]
    (first, at0, _), (second, at, restored) = starts(lines)
    assert (first, at0, second) == (1, 0, 2)
    assert 0 < at <= 8 + 1, lines  # the last synced checkpoint, not step 0
    assert restored == f"checkpoints/step_{at - 1:04d}"
    assert last_step(lines) == STEPS - 1 and f"done at step {STEPS - 1}" in lines
    assert final.attempt == 2 and final.attempts_allowed == 4
    ended, resumed = final.attempts
    assert ended.interrupted and ended.status == JobStatus.failed
    assert "killed (SIGKILL)" in (ended.reason or "")
    assert resumed.resumed_from == restored and resumed.restored_bytes > 0
    assert resumed.status == JobStatus.succeeded and resumed.started_at is not None
    boundary = [line for line in lines if line.startswith("j2c: resume: attempt 1 of 4 ended")]
    assert len(boundary) == 1 and f"attempt 2 resumes from {restored}" in boundary[0]
    # j2c status: the attempt it is on, then each attempt's end and restore point.
    status = describe(final).splitlines()
    assert "attempt    2 of 4" in status
    first_line, second_line = (line for line in status if line.startswith(("  1  ", "  2  ")))
    assert "ended: its runner j2c-unpack was killed (SIGKILL)" in first_line
    assert f"resumed from {restored}" in second_line and "succeeded" in second_line
    print(f"local: kill to the resumed first step {resumed_after:.2f} s")


async def test_usage_counts_every_attempts_run_and_marks_the_job_preempted(
    tmp_path: Path, resumable: Path
) -> None:
    data = tmp_path / "data"
    settings = _settings(data)
    final, _, _ = await _run_and_kill(settings, _request(resumable), kills=1)
    store = open_store(settings.storage_url())
    try:
        loaded = await load_records(store, 3600)
    finally:
        await store.close()
    (usage,) = [r for r in loaded.records if r.job_id == final.id]
    assert usage.kind == "end" and usage.attempts == 2 and usage.preempted
    ran = [a.ended_at - a.started_at for a in final.attempts if a.ended_at and a.started_at]
    assert len(ran) == 2
    assert usage.run_s == pytest.approx(sum(ran), abs=0.01)


async def test_max_attempts_is_honoured(tmp_path: Path, resumable: Path) -> None:
    data = tmp_path / "data"
    settings = _settings(data)
    final, lines, _ = await _run_and_kill(
        settings, _request(resumable, max_attempts=1), kills=1, timeout_s=60
    )
    assert final.status == JobStatus.succeeded  # one resume allowed: it ran to the end
    service = JobService(settings)
    service.start()
    try:
        record = await service.submit(_request(resumable, max_attempts=1, new=True))
        for attempt in (1, 2):
            await _until(service, record.id, f"attempt {attempt} starts at step")
            await _until(service, record.id, "j2c: checkpoints: synced")
            _kill_runner(data, await service.get(record.id))
        async with asyncio.timeout(60):
            final = await service.wait(record.id)
        lines = await _lines(service, record.id)
    finally:
        await service.stop()
    assert final.status == JobStatus.failed and final.attempt == 2
    assert "no attempts left (max_attempts 1)" in (final.message or "")
    assert [n for n, _, _ in starts(lines)] == [1, 2]


async def test_a_cancel_and_a_failing_script_end_the_job_without_a_new_attempt(
    tmp_path: Path, resumable: Path
) -> None:
    data = tmp_path / "data"
    failing = resumable.parent / "failing"
    failing.mkdir()
    (failing / "train.py").write_text("import sys\nprint('failing', flush=True)\nsys.exit(3)\n")
    settle(failing)
    settings = _settings(data)
    service = JobService(settings)
    service.start()
    try:
        cancelled = await service.submit(_request(resumable))
        failed = await service.submit(
            JobRequest(code_path=str(failing), call_path=str(failing / "train.py"))
        )
        await _until(service, cancelled.id, "step 2")
        await service.cancel(cancelled.id)
        async with asyncio.timeout(60):
            ends = [await service.wait(cancelled.id), await service.wait(failed.id)]
    finally:
        await service.stop()
    assert [end.status for end in ends] == [JobStatus.cancelled, JobStatus.failed]
    assert [end.attempt for end in ends] == [1, 1]
    assert ends[1].exit_code == 3
    assert [len(end.attempts) for end in ends] == [1, 1]
    assert not any(attempt.interrupted for end in ends for attempt in end.attempts)
