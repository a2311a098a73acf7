"""A container job killed with ``podman kill`` (as a lost node or engine would end it) resumes
from its last synced checkpoint as the next attempt of the same job, and succeeds as one job.

Real podman (the platform image), a real ``j2c-unpack`` in each container, a ``file://`` store
shared with the jobs' uid. The job is a training loop that writes ``checkpoints/step_NNNN``
every step and resumes from ``$J2C_RESUMED_FROM`` (tests/support/resumable.py).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path

import pytest

from j2c_server.config import J2CSettings, load_settings
from j2c_server.jobs.service import JobService
from j2c_server.wire.api import Event, EventKind, JobRequest, JobStatus
from j2c_server.wire.event_frames import diary_text
from tests.support.jobs import settle
from tests.support.podman import Podman
from tests.support.resumable import first_line, last_step, resume_bytes, starts, write_resumable

STEPS = 40
PAUSE_S = 0.25


def _settings(podman: Podman, data: Path) -> J2CSettings:
    return load_settings(
        environ={},
        overrides={
            "data_dir": str(data),
            "storage": {"url": (data / "store").as_uri(), "shared": True},
            "scheduler": {"container": {"socket": podman.socket, "cancel_grace_s": 2}},
            "resume": {"sync_every_s": 1, "backoff_s": 0.5},
        },
    )


def _lines(events: list[Event]) -> list[str]:
    return [diary_text(e.model_dump(mode="json")) for e in events if e.kind == EventKind.log]


def _podman(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["podman", "--runtime", "runc", *args], capture_output=True, text=True, timeout=60
    )


async def test_a_container_killed_by_podman_resumes_from_its_checkpoint_as_one_job(
    podman: Podman, tmp_path: Path
) -> None:
    project = tmp_path / "proj"
    write_resumable(project)
    settle(project)
    settings = _settings(podman, tmp_path / "data")
    service = JobService(settings)
    service.start()
    try:
        record = await service.submit(
            JobRequest(
                code_path=str(project),
                call_path="resumable.py",
                args=[str(STEPS), str(PAUSE_S)],
                scheduler="container",
                image=podman.image,
            )
        )
        await first_line(service, record.id, "attempt 1 starts at step 0")
        step = await first_line(service, record.id, "step 6")
        synced = await first_line(service, record.id, "j2c: checkpoints: synced", after=step.seq)
        running = await service.get(record.id)
        assert running.handle is not None
        killed = _podman("kill", running.handle.id)
        killed_at = time.time()
        assert killed.returncode == 0, killed.stderr
        resumed = await first_line(service, record.id, "attempt 2 starts at step", after=synced.seq)
        async with asyncio.timeout(180):
            final = await service.wait(record.id)
        events = await service.events(record.id)
    finally:
        await service.stop()
    lines = _lines(events)
    assert final.status == JobStatus.succeeded, lines[-30:]
    (first, at0, _), (second, at, restored) = starts(lines)
    assert (first, at0, second) == (1, 0, 2)
    synced_step = int(synced.text.rsplit("step_", 1)[1]) if "newest" in (synced.text or "") else 6
    assert synced_step < at <= STEPS - 1  # from the last synced checkpoint, not step 0
    assert restored == f"checkpoints/step_{at - 1:04d}"
    assert last_step(lines) == STEPS - 1 and f"done at step {STEPS - 1}" in lines
    ended, last = final.attempts
    assert ended.interrupted and "killed (exit code 137) without a cancel" in (ended.reason or "")
    assert last.resumed_from == restored and last.status == JobStatus.succeeded
    assert final.attempt_words() == "attempt 2 of 4"
    # The killed attempt's container was collected and removed; the job's is too.
    assert _podman("container", "exists", ended.scheduler_job_id or "").returncode == 1
    print(
        f"container: podman kill to the resumed first step {resumed.time - killed_at:.2f} s; "
        f"the resumed attempt: {resume_bytes(lines)}"
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="reads another uid's outputs folder")
async def test_a_containers_own_failure_is_no_interruption(podman: Podman, tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text("import sys\nprint('failing', flush=True)\nsys.exit(137)\n")
    settle(project)
    service = JobService(_settings(podman, tmp_path / "data"))
    service.start()
    try:
        record = await service.submit(
            JobRequest(
                code_path=str(project),
                call_path="train.py",
                scheduler="container",
                image=podman.image,
            )
        )
        async with asyncio.timeout(180):
            final = await service.wait(record.id)
    finally:
        await service.stop()
    assert final.status == JobStatus.failed and final.exit_code == 137
    assert final.attempt == 1 and not final.attempts[0].interrupted, final.attempts
