"""The GPU ledger is a fair queue: waiters take tickets in arrival order, are told how many jobs
are ahead of them, get the GPU in that order, and a waiter killed in line blocks nobody.

Real waiter processes on a real ledger folder (files and flocks); each waiter writes what it
sees as JSON lines to its own file, which the test reads.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from j2c_server.schedulers import gpu_ledger as local_gpus
from j2c_server.schedulers.local.backend import LocalScheduler
from j2c_server.wire.api import JobStatus
from tests.schedulers.test_local import gpu_job, wait_status

TIMEOUT_S = 30.0

# A waiter: asks for GPU "0" until granted, writing each change of its place in line; once
# granted it holds the GPU until the test creates its release file.
_WAITER = """
import importlib.util, json, os, sys, time
spec = importlib.util.spec_from_file_location("lg", sys.argv[1])
lg = importlib.util.module_from_spec(spec)
sys.modules["lg"] = lg
spec.loader.exec_module(lg)
ledger = lg.GpuLedger(__import__("pathlib").Path(sys.argv[2]))
job, out = sys.argv[3], sys.argv[4]
def say(**what):
    with open(out, "a") as f:
        f.write(json.dumps(what) + "\\n")
seen = None
while True:
    grant = ledger.try_acquire(job, 1, ["0"])
    if grant.devices:
        say(granted=grant.devices[0], at=time.monotonic_ns())
        break
    if grant.ahead != seen:
        seen = grant.ahead
        say(ahead=grant.ahead, message=lg.waiting_message(1, grant))
    time.sleep(0.02)
while not os.path.exists(out + ".release"):
    time.sleep(0.02)
ledger.release()
"""


@pytest.fixture
def ledger() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="j2c-queue-test-"))
    folder = base / "gpus"
    local_gpus.check_ledger_dir(folder)
    yield folder
    shutil.rmtree(base, ignore_errors=True)


class Waiters:
    def __init__(self, ledger: Path, tmp: Path) -> None:
        self.ledger, self.tmp = ledger, tmp
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str) -> None:
        argv = [local_gpus.__file__, str(self.ledger), name, str(self.out(name))]
        self.processes[name] = subprocess.Popen([sys.executable, "-c", _WAITER, *argv])

    def out(self, name: str) -> Path:
        return self.tmp / f"{name}.jsonl"

    def said(self, name: str) -> list[dict[str, Any]]:
        path = self.out(name)
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]

    def wait_until(self, name: str, **wanted: Any) -> dict[str, Any]:
        """The first line of ``name`` holding ``wanted`` (a key with None: present at all)."""
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            for line in self.said(name):
                if all(k in line and (v is None or line[k] == v) for k, v in wanted.items()):
                    return line
            assert time.monotonic() < deadline, f"{name} never said {wanted}: {self.said(name)}"
            time.sleep(0.02)

    def release(self, name: str) -> None:
        Path(f"{self.out(name)}.release").touch()
        assert self.processes[name].wait(timeout=TIMEOUT_S) == 0

    def stop_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()


@pytest.fixture
def waiters(ledger: Path, tmp_path: Path) -> Iterator[Waiters]:
    made = Waiters(ledger, tmp_path)
    yield made
    made.stop_all()


def _hold_gpu(ledger: Path) -> local_gpus.GpuLedger:
    holder = local_gpus.GpuLedger(ledger)
    assert holder.try_acquire("holder", 1, ["0"]).devices == ["0"]
    return holder


def _line_up(waiters: Waiters, names: list[str]) -> None:
    """Start each waiter once the one before it holds its ticket: arrival order is known."""
    for place, name in enumerate(names):
        waiters.start(name)
        line = waiters.wait_until(name, ahead=place)
        expected = (
            "next in line, 0 free"
            if place == 0
            else f"{place} job" + (" ahead" if place == 1 else "s ahead")
        )
        assert line["message"] == f"waiting for 1 GPU: {expected}"


def test_three_waiters_get_the_gpu_in_arrival_order(ledger: Path, waiters: Waiters) -> None:
    holder = _hold_gpu(ledger)
    _line_up(waiters, ["first", "second", "third"])
    holder.release()

    waiters.wait_until("first", granted="0")
    # Each one moves up as the line shortens; none jumps it while the GPU is held.
    waiters.wait_until("second", ahead=0)
    waiters.wait_until("third", ahead=1)
    assert not any("granted" in line for line in waiters.said("second") + waiters.said("third"))

    waiters.release("first")
    second = waiters.wait_until("second", granted="0")
    waiters.wait_until("third", ahead=0)
    waiters.release("second")
    third = waiters.wait_until("third", granted="0")
    waiters.release("third")

    first = waiters.said("first")[-1]
    assert first["at"] < second["at"] < third["at"]
    assert list(ledger.glob("wait-*")) == [] and list(ledger.glob("gpu-*")) == []


def test_a_waiter_killed_in_line_blocks_nobody(ledger: Path, waiters: Waiters) -> None:
    holder = _hold_gpu(ledger)
    _line_up(waiters, ["first", "killed", "third"])
    waiters.processes["killed"].send_signal(signal.SIGKILL)
    waiters.processes["killed"].wait()
    # Its ticket's flock went with it: the one behind it counts one job ahead, not two.
    waiters.wait_until("third", ahead=1)

    holder.release()
    waiters.wait_until("first", granted="0")
    waiters.release("first")
    waiters.wait_until("third", granted="0")
    waiters.release("third")
    # The dead ticket was this user's: removed on the way.
    assert list(ledger.glob("wait-*")) == []


async def test_a_local_job_says_how_many_jobs_are_ahead_of_it(ledger: Path, tmp_path: Path) -> None:
    from j2c_server.config import J2CSettings

    settings = J2CSettings.model_validate(
        {
            "data_dir": str(tmp_path / "data"),
            "scheduler": {
                "local": {"gpus": 1, "pass_env": ["PYTHONPATH"]},
                "gpu_ledger": str(ledger),
            },
        }
    )
    scheduler = LocalScheduler(settings)
    gates = tmp_path / "gates"
    gates.mkdir()
    holder = _hold_gpu(ledger)
    try:
        first = await scheduler.submit(gpu_job("queue-first", gates / "first"))
        state = await wait_status(scheduler, first, JobStatus.queued)
        assert state.message == "waiting for 1 GPU: next in line, 0 free"
        second = await scheduler.submit(gpu_job("queue-second", gates / "second"))
        state = await wait_status(scheduler, second, JobStatus.queued)
        deadline = time.monotonic() + TIMEOUT_S
        while state.message != "waiting for 1 GPU: 1 job ahead":
            assert time.monotonic() < deadline, state
            await asyncio.sleep(0.02)
            state = await scheduler.status(second)
        holder.release()
        await wait_status(scheduler, first, JobStatus.running)
        state = await scheduler.status(second)
        assert state.status == JobStatus.queued
        (gates / "first").touch()
        await wait_status(scheduler, second, JobStatus.running)
        (gates / "second").touch()
        await wait_status(scheduler, second, JobStatus.succeeded)
    finally:
        holder.release()
        for gate in ("first", "second"):
            (gates / gate).touch()
        await scheduler.close()


def test_a_container_jobs_waiter_says_its_place_and_leaves_on_cancel(
    ledger: Path, tmp_path: Path
) -> None:
    """The container backend's waiter process in the same line: it says why it waits in
    ``gpus.json`` and ends without a container when cancelled (no engine is reached before a
    grant, so none runs here)."""
    from j2c_server.config import J2CSettings
    from j2c_server.schedulers.container.gpus import GpuWaiter
    from tests.schedulers.test_local import job_spec

    settings = J2CSettings.model_validate(
        {
            "data_dir": str(tmp_path / "data"),
            "scheduler": {
                "gpu_ledger": str(ledger),
                "container": {"gpus": 1, "socket": str(tmp_path / "no-engine.sock")},
            },
        }
    )
    holder = _hold_gpu(ledger)
    folder = tmp_path / "job"
    folder.mkdir()
    waiter = GpuWaiter(settings)
    try:
        spec = job_spec("container-gpu", "print('never')", gpus=1)
        waiter.start(spec, folder, request={"name": "j2c-never", "body": {"HostConfig": {}}})
        deadline = time.monotonic() + TIMEOUT_S
        while waiter.waiting(folder) != "waiting for 1 GPU: next in line, 0 free":
            assert time.monotonic() < deadline, waiter.waiting(folder)
            time.sleep(0.05)
        (folder / "cancelled").touch()
        while waiter.waiting(folder) is not None:
            assert time.monotonic() < deadline, waiter.waiting(folder)
            time.sleep(0.05)
        assert json.loads((folder / "gpus.json").read_text()) == {"state": "cancelled"}
        assert list(ledger.glob("wait-*")) == []
    finally:
        (folder / "cancelled").touch()
        holder.release()
