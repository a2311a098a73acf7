"""The local scheduler's GPU ledger is machine-wide: every user's servers draw from one pool, no
user can remove or forge another's claim, and a stale claim (its supervisor died) is reclaimed.

Real supervisors, real files and flocks; the second user is a real one (``nobody``, through
``runuser``) where the tests run as root.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from j2c_server.config import J2CSettings
from j2c_server.core.errors import ConfigError
from j2c_server.schedulers import gpu_ledger as local_gpus
from j2c_server.schedulers.local.backend import LocalScheduler
from j2c_server.schedulers.state_files import same_process
from j2c_server.wire.api import JobStatus
from tests.schedulers.test_local import first_line, gpu_job, wait_status
from tests.support.other_users import checkout_closed_to_others

OTHER_USER = "nobody"
OTHER_UID = 65534
MakeScheduler = Callable[..., LocalScheduler]


def _kill_jobs(data: Path) -> None:
    for record_path in (data / "runs").glob("*/job.json"):
        record = json.loads(record_path.read_text())
        for who in ("child", "supervisor"):
            entry = record.get(who)
            if entry and same_process(entry["pid"], entry["start_time"]):
                try:
                    if who == "child":
                        os.killpg(entry["pid"], signal.SIGKILL)
                    else:
                        os.kill(entry["pid"], signal.SIGKILL)
                except ProcessLookupError:
                    pass


@pytest.fixture
def ledger() -> Iterator[Path]:
    """A ledger folder every user can reach (pytest's tmp_path is 0700), removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix="j2c-ledger-test-"))
    base.chmod(0o755)
    yield base / "gpus"
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def user_scheduler(tmp_path: Path, ledger: Path) -> Iterator[MakeScheduler]:
    """``make(name)``: a LocalScheduler on its own data dir (one user's server) and the shared
    ledger, with one GPU."""
    made: list[Path] = []

    def make(name: str, **local: Any) -> LocalScheduler:
        data = tmp_path / name
        made.append(data)
        local = {
            "gpus": 1,
            "cancel_grace_s": 1.0,
            "pass_env": ["PYTHONPATH"],  # supervisors run this checkout's code
            **local,
        }
        settings = J2CSettings.model_validate(
            {"data_dir": str(data), "scheduler": {"local": local, "gpu_ledger": str(ledger)}}
        )
        return LocalScheduler(settings)

    yield make
    for data in made:
        _kill_jobs(data)


def claims(ledger: Path) -> list[Path]:
    return sorted(ledger.glob("gpu-*"))


async def test_two_data_dirs_share_one_pool(user_scheduler: MakeScheduler, tmp_path: Path) -> None:
    alice, bob = user_scheduler("alice"), user_scheduler("bob")
    gates = tmp_path / "gates"
    gates.mkdir()
    first = await alice.submit(gpu_job("alice-job", gates / "a"))
    assert await first_line(alice, first) == "0"
    second = await bob.submit(gpu_job("bob-job", gates / "b"))
    queued = await wait_status(bob, second, JobStatus.queued)
    assert queued.message == "waiting for 1 GPU: next in line, 0 free"

    (gates / "a").touch()
    await wait_status(alice, first, JobStatus.succeeded)
    assert await first_line(bob, second) == "0"


async def test_a_stale_claim_is_reclaimed_and_another_users_stays(
    user_scheduler: MakeScheduler, ledger: Path, tmp_path: Path
) -> None:
    local_gpus.check_ledger_dir(ledger)
    mine = ledger / "gpu-0.0000stale"  # a claim whose supervisor died: nobody holds its flock
    mine.write_text(json.dumps({"device": "0", "pid": 999999, "job_id": "dead"}))
    theirs = ledger / "gpu-0.0000other"
    theirs.write_text(json.dumps({"device": "0", "pid": 999998, "job_id": "gone"}))
    os.chown(theirs, OTHER_UID, OTHER_UID)
    os.mkfifo(ledger / "gpu-0.fifo")  # not a claim: must neither block nor count
    gates = tmp_path / "gates"
    gates.mkdir()
    scheduler = user_scheduler("alice")
    handle = await scheduler.submit(gpu_job("reclaims", gates / "go"))
    assert await first_line(scheduler, handle) == "0"
    assert not mine.exists()  # our own stale claim is cleaned up
    assert theirs.exists()  # another user's is only ignored: the sticky bit keeps it
    live = [path for path in claims(ledger) if path not in (theirs, ledger / "gpu-0.fifo")]
    assert len(live) == 1 and json.loads(live[0].read_text())["job_id"] == "reclaims"


async def test_a_killed_supervisors_gpu_goes_to_the_next_user(
    user_scheduler: MakeScheduler, tmp_path: Path
) -> None:
    alice, bob = user_scheduler("alice"), user_scheduler("bob")
    gates = tmp_path / "gates"
    gates.mkdir()
    lost = await alice.submit(gpu_job("dies", gates / "never"))
    assert await first_line(alice, lost) == "0"
    record = json.loads((Path(lost.data["run_dir"]) / "job.json").read_text())
    os.kill(record["supervisor"]["pid"], signal.SIGKILL)
    os.killpg(record["child"]["pid"], signal.SIGKILL)
    successor = await bob.submit(gpu_job("next", gates / "next"))
    assert await first_line(bob, successor) == "0"


_RACER = """
import importlib.util, os, sys, time
spec = importlib.util.spec_from_file_location("lg", sys.argv[1])
lg = importlib.util.module_from_spec(spec)
sys.modules["lg"] = lg
spec.loader.exec_module(lg)
ledger = lg.GpuLedger(__import__("pathlib").Path(sys.argv[2]))
while not os.path.exists(sys.argv[4]):
    pass  # all start together
for _ in range(ROUNDS):
    while True:
        grant = ledger.try_acquire(sys.argv[3], 1, ["0", "1"])
        if grant.devices:
            break
    start = time.monotonic_ns()
    time.sleep(0.002)
    end = time.monotonic_ns()
    ledger.release()
    print(grant.devices[0], start, end, flush=True)
"""
_RACERS, _ROUNDS = 8, 10


def test_racing_claimants_never_hold_one_gpu_at_once(ledger: Path, tmp_path: Path) -> None:
    local_gpus.check_ledger_dir(ledger)
    go = tmp_path / "go"
    code = _RACER.replace("ROUNDS", str(_ROUNDS))
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", code, local_gpus.__file__, str(ledger), f"job-{n}", str(go)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(_RACERS)
    ]
    go.touch()
    held: dict[str, list[tuple[int, int]]] = {"0": [], "1": []}
    for racer in racers:
        out, _ = racer.communicate(timeout=120)
        for line in out.splitlines():
            device, start, end = line.split()
            held[device].append((int(start), int(end)))
    assert sum(len(spans) for spans in held.values()) == _RACERS * _ROUNDS
    for spans in held.values():
        spans.sort()
        assert all(before[1] <= after[0] for before, after in itertools.pairwise(spans))
    assert claims(ledger) == [] and list(ledger.glob("wait-*")) == []


# --------------------------------------------------------------------------- another real user

_OTHER_USERS_SERVER = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("lg", sys.argv[1])
lg = importlib.util.module_from_spec(spec)
sys.modules["lg"] = lg
spec.loader.exec_module(lg)
ledger = lg.GpuLedger(__import__("pathlib").Path(sys.argv[2]))
grant = ledger.try_acquire("other-users-job", 1, ["0"])
print(json.dumps({"devices": grant.devices, "free": grant.free}), flush=True)
sys.stdin.readline()
ledger.release()
"""


def _as_other_user(*argv: str, **kwargs: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(["runuser", "-u", OTHER_USER, "--", *argv], text=True, **kwargs)


def _other_users_server(ledger: Path) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    process = _as_other_user(
        "/usr/bin/python3",
        "-c",
        _OTHER_USERS_SERVER,
        local_gpus.__file__,
        str(ledger),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert process.stdout is not None
    return process, json.loads(process.stdout.readline())


def _release(process: subprocess.Popen[str]) -> None:
    assert process.stdin is not None
    process.stdin.write("\n")
    process.stdin.close()
    assert process.wait(timeout=30) == 0


@pytest.mark.skipif(bool(checkout_closed_to_others()), reason=str(checkout_closed_to_others()))
@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("runuser") is None or not Path("/usr/bin/python3").exists(),
    reason="needs root, runuser and /usr/bin/python3 to act as a second user",
)
async def test_another_user_shares_the_pool_and_cannot_touch_our_claim(
    user_scheduler: MakeScheduler, ledger: Path, tmp_path: Path
) -> None:
    scheduler = user_scheduler("root-user")
    local_gpus.check_ledger_dir(ledger)
    theirs, grant = _other_users_server(ledger)
    try:
        assert grant == {"devices": ["0"], "free": 0}
        [their_claim] = claims(ledger)
        assert their_claim.stat().st_uid == OTHER_UID
        gates = tmp_path / "gates"
        gates.mkdir()
        handle = await scheduler.submit(gpu_job("ours", gates / "go"))
        queued = await wait_status(scheduler, handle, JobStatus.queued)
        assert queued.message == "waiting for 1 GPU: next in line, 0 free"
    finally:
        _release(theirs)
    assert await first_line(scheduler, handle) == "0"

    [our_claim] = claims(ledger)
    assert our_claim.stat().st_uid == os.getuid()
    before = our_claim.read_bytes()
    for attack in (["rm", "-f", str(our_claim)], ["mv", str(our_claim), str(ledger / "x")]):
        assert _as_other_user(*attack, stderr=subprocess.DEVNULL).wait(timeout=30) != 0
    overwrite = _as_other_user("sh", "-c", f"echo forged > {our_claim}", stderr=subprocess.DEVNULL)
    assert overwrite.wait(timeout=30) != 0
    assert our_claim.read_bytes() == before
    second, grant = _other_users_server(ledger)
    _release(second)
    assert grant == {"devices": None, "free": 0}  # our claim holds against theirs
    assert (await scheduler.status(handle)).status == JobStatus.running


# --------------------------------------------------------------------------- the ledger folder


@pytest.mark.parametrize("problem", ["other-owner", "no-sticky-bit", "symlink", "file"])
async def test_a_ledger_folder_others_could_tamper_with_is_refused_naming_the_key(
    user_scheduler: MakeScheduler, ledger: Path, tmp_path: Path, problem: str
) -> None:
    if problem == "other-owner":
        ledger.mkdir(mode=0o1777)
        os.chown(ledger, OTHER_UID, OTHER_UID)
    elif problem == "no-sticky-bit":
        ledger.mkdir()
        ledger.chmod(0o777)
    elif problem == "symlink":
        (tmp_path / "elsewhere").mkdir(mode=0o1777)
        ledger.symlink_to(tmp_path / "elsewhere")
    else:
        ledger.write_text("")
    scheduler = user_scheduler("alice")
    with pytest.raises(ConfigError) as caught:
        await scheduler.submit(gpu_job("refused", tmp_path / "never"))
    assert caught.value.field == "scheduler.gpu_ledger"
    assert str(ledger) in caught.value.message
    assert "install -d -m 1777" in caught.value.message


def test_a_missing_ledger_folder_is_made_shared_and_sticky(ledger: Path) -> None:
    old = os.umask(0o022)
    try:
        local_gpus.check_ledger_dir(ledger)
    finally:
        os.umask(old)
    assert ledger.stat().st_mode & 0o7777 == 0o1777
