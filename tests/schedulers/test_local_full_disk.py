"""A local job whose data dir runs full for a moment: the supervisor's records wait for space.

Found by the chaos soak's ``disk_full`` leg (benchmarks/soak.py): a supervisor that met a full
disk writing ``job.json`` or ``exit.json`` died, and its job read ``lost`` ("the supervisor is
gone and left no exit record") although it ran, or was about to run, to its end. The data dir is
a real 4 MB tmpfs filled by a ballast file; the tests skip, saying why, where it cannot be
mounted (not root).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from j2c_server.config import J2CSettings
from j2c_server.schedulers.base import JobSpec
from j2c_server.schedulers.local.backend import LocalScheduler
from j2c_server.schedulers.state_files import same_process
from j2c_server.wire.api import JobHandle, JobStatus, Resources
from tests.support.full_disk import small_disk, take_all_space

TIMEOUT_S = 30.0


@pytest.fixture
def small_data_dir(tmp_path: Path) -> Iterator[Path]:
    """The scheduler's data dir on a 4 MB tmpfs; its jobs killed and it unmounted at the end."""
    with small_disk(tmp_path / "data", 4) as data:
        try:
            yield data
        finally:
            for record_path in (data / "runs").glob("*/job.json"):
                record = json.loads(record_path.read_text())
                for proc in (record.get("child"), record.get("supervisor")):
                    if proc and same_process(proc["pid"], proc["start_time"]):
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(proc["pid"], signal.SIGKILL)


def scheduler_on(data: Path, ledger: Path) -> LocalScheduler:
    scheduler = {"local": {"pass_env": ["PYTHONPATH"]}, "gpu_ledger": str(ledger)}
    return LocalScheduler(
        J2CSettings.model_validate({"data_dir": str(data), "scheduler": scheduler})
    )


def gated_job(job_id: str, gate: Path) -> JobSpec:
    """A job that prints nothing (its own output is not what is tested) and ends at the gate."""
    code = f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.01)\n"
    return JobSpec(
        job_id=job_id,
        name=job_id,
        key=f"key-{job_id}",
        command=[sys.executable, "-c", code],
        resources=Resources(),
    )


async def wait_status(scheduler: LocalScheduler, handle: JobHandle, *wanted: JobStatus) -> str:
    deadline = time.monotonic() + TIMEOUT_S
    while (state := await scheduler.status(handle)).status not in wanted:
        assert time.monotonic() < deadline, f"still {state} after {TIMEOUT_S}s"
        await asyncio.sleep(0.05)
    return state.status


async def test_a_job_that_ends_while_the_disk_is_full_succeeds_once_space_returns(
    small_data_dir: Path, tmp_path: Path
) -> None:
    scheduler = scheduler_on(small_data_dir, tmp_path / "gpu-ledger")
    gate = tmp_path / "gate"
    handle = await scheduler.submit(gated_job("full-1", gate))
    await wait_status(scheduler, handle, JobStatus.running)

    assert take_all_space(small_data_dir / "ballast") > 0
    gate.touch()  # the job ends now; its exit record cannot be written yet
    await asyncio.sleep(1.5)
    during = await scheduler.status(handle)
    assert during.status == JobStatus.running, during  # still being recorded, not lost
    (small_data_dir / "ballast").unlink()

    ended = await wait_status(scheduler, handle, JobStatus.succeeded, JobStatus.lost)
    assert ended == JobStatus.succeeded, await scheduler.status(handle)
    await scheduler.close()


async def test_a_job_that_failed_on_a_full_disk_says_so_though_its_log_could_not(
    small_data_dir: Path, tmp_path: Path
) -> None:
    """Found by the all-legs soak: a job sent while the data dir was full ended "exit code 1"
    with an empty log (its last words could not be written either). Its status says why."""
    scheduler = scheduler_on(small_data_dir, tmp_path / "gpu-ledger")
    fill = "open('big', 'wb').write(b'x' * 50_000_000)\n"  # in its work folder: the 4 MB disk
    handle = await scheduler.submit(
        JobSpec(
            job_id="full-2",
            name="full-2",
            key="key-full-2",
            command=[sys.executable, "-c", fill],
            resources=Resources(),
        )
    )
    big = small_data_dir / "runs" / "full-2" / "work" / "big"
    deadline = time.monotonic() + TIMEOUT_S
    while not big.exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await asyncio.sleep(1.0)  # it failed; its exit record waits for space
    big.unlink()
    ended = await wait_status(scheduler, handle, JobStatus.failed, JobStatus.lost)
    state = await scheduler.status(handle)
    assert ended == JobStatus.failed, state
    assert state.exit_code == 1
    assert "was full" in (state.message or "") and "free when it ended" in (state.message or "")
    await scheduler.close()


async def test_a_job_that_died_while_the_disk_was_full_says_so_though_space_came_back(
    small_data_dir: Path, tmp_path: Path
) -> None:
    """Found by the all-legs soak: the disk was full for 1.5 s while a job wrote; it died
    "exit code 1" with nothing in its log, and the space was back when it ended. The supervisor
    saw the full disk while the job ran: its status says so."""
    scheduler = scheduler_on(small_data_dir, tmp_path / "gpu-ledger")
    gate = tmp_path / "gate"
    code = (
        "import os, sys, time\n"
        f"while not os.path.exists({str(gate)!r}): time.sleep(0.01)\n"
        "try:\n    open('out', 'wb').write(b'x' * 65536)\n"
        "except OSError:\n    time.sleep(1.0); sys.exit(1)\n"  # dies a moment later
    )
    handle = await scheduler.submit(
        JobSpec(
            job_id="full-3",
            name="full-3",
            key="key-full-3",
            command=[sys.executable, "-c", code],
            resources=Resources(),
        )
    )
    await wait_status(scheduler, handle, JobStatus.running)
    assert take_all_space(small_data_dir / "ballast") > 0
    gate.touch()
    await asyncio.sleep(0.6)  # its write failed; the supervisor has seen the full disk
    (small_data_dir / "ballast").unlink()  # space is back before the job ends
    ended = await wait_status(scheduler, handle, JobStatus.failed, JobStatus.lost)
    state = await scheduler.status(handle)
    assert ended == JobStatus.failed and state.exit_code == 1, state
    assert "was full" in (state.message or ""), state
    assert "at the lowest while it ran" in (state.message or ""), state
    await scheduler.close()
