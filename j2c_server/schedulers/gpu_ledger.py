"""This machine's GPUs for the backends that run jobs here (local, container): which exist, and
which job holds which.

One pool for the whole machine, shared by every user's servers, kernels and CLIs: the ledger is
a folder outside any data dir (``scheduler.gpu_ledger``, default
:data:`DEFAULT_LEDGER_DIR`) that every user can write and none can tamper with, like ``/tmp``:
root-owned (or the user's own), world-writable only with the sticky bit, so a file in it can be
removed or replaced by its owner alone.

- A **claim** of device ``D`` is a file ``gpu-<D>.<token>`` that the claiming supervisor creates
  (``O_EXCL``, so it is owned by the claimant) and holds an exclusive flock on for as long as it
  lives. A claim whose flock is free is stale (its supervisor is gone): it is ignored, and removed
  when it is the caller's own. A device is free when it has no live claim. After creating its
  claim a supervisor looks again, and gives the device up if another live claim exists: of two
  racing claimants at least the later one sees the other, so a device is never held twice.
- A **waiter** is a ticket: a file ``wait-<ns>.<token>``, flock-held the same way while its job
  waits, named by the time it first asked. Jobs are served first come, first served among those
  whose devices overlap: a job takes GPUs only when no live ticket older than its own wants any
  of its devices, so "2 jobs ahead" is its true place. A dead waiter's ticket has a free flock
  and is skipped (and removed by its owner's next look), so a crash never blocks the line.

Another user can neither remove a claim (sticky bit) nor make one look like someone else's (a
claim is its file, owned by its creator); the files hold only the claimant's PID and job id.

The supervisor imports this module, so it stays on the standard library.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

_DETECT_TIMEOUT_S = 10.0
DEFAULT_LEDGER_DIR = "/tmp/j2c-gpus"
# Shared by all users: everyone may create entries, the sticky bit keeps them apart.
LEDGER_DIR_MODE = 0o1777
_CLAIM_PREFIX = "gpu-"
_WAIT_PREFIX = "wait-"
_SAFE_DEVICE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def detect_gpu_ids(configured: int | None, environ: Mapping[str, str]) -> list[str]:
    """The device ids jobs may be given, as ``CUDA_VISIBLE_DEVICES`` entries.

    A configured count wins. Otherwise a lab that was itself given some GPUs (its own
    ``CUDA_VISIBLE_DEVICES``) shares exactly those; otherwise ``nvidia-smi -L`` counts them.
    """
    if configured is not None:
        return [str(index) for index in range(configured)]
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [entry.strip() for entry in visible.split(",") if entry.strip()]
    nvidia_smi = shutil.which("nvidia-smi", path=environ.get("PATH"))
    if nvidia_smi is None:
        return []
    try:
        listing = subprocess.run(
            [nvidia_smi, "-L"],
            capture_output=True,
            text=True,
            timeout=_DETECT_TIMEOUT_S,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []  # a driver that does not answer offers no GPUs
    count = sum(1 for line in listing.splitlines() if line.startswith("GPU "))
    return [str(index) for index in range(count)]


class LedgerError(Exception):
    """The ledger folder cannot be used safely (the message says why and what to do)."""


def check_ledger_dir(folder: Path) -> None:
    """Create the ledger folder (mode 1777) when missing; refuse one others could tamper with:
    not a real folder, owned by another user than root or us, or writable by others without the
    sticky bit."""
    try:
        os.mkdir(folder, LEDGER_DIR_MODE)
    except FileExistsError:
        pass
    except OSError as exc:
        raise LedgerError(f"cannot create the GPU ledger folder {folder}: {exc.strerror}") from None
    else:
        os.chmod(folder, LEDGER_DIR_MODE)  # past the umask
    info = os.lstat(folder)
    fix = f"an operator creates it once: install -d -m 1777 -o root {folder}"
    if not stat.S_ISDIR(info.st_mode):
        raise LedgerError(f"the GPU ledger {folder} is not a folder; {fix}")
    if info.st_uid not in (0, os.getuid()):
        raise LedgerError(
            f"the GPU ledger folder {folder} belongs to another user (uid {info.st_uid}), who "
            f"could remove any claim in it; {fix}"
        )
    if info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
        raise LedgerError(
            f"the GPU ledger folder {folder} is writable by others without the sticky bit, so "
            f"anyone could remove a claim; {fix}"
        )


def _device_part(device: str) -> str:
    """The device id as it appears in a claim's name (hashed when it has odd characters)."""
    if _SAFE_DEVICE.match(device):
        return device
    return "h" + hashlib.sha256(device.encode()).hexdigest()[:24]


def _probe(path: Path) -> bool | None:
    """True while someone holds ``path``'s flock, False when it is free (stale); None when it
    is no ledger entry (gone, not a regular file, a symlink)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        # A shared probe: two probes never mistake each other for a holder.
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        os.close(fd)
    return False


def _remove_if_stale_and_mine(path: Path) -> None:
    """Remove a stale entry of this user (others' stay: the sticky bit keeps them). Removed
    while holding its flock, so an entry whose creator is about to lock it is never removed
    after being locked: its creator then finds its name gone and gives it up."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            return
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.stat(path, follow_symlinks=False).st_ino == info.st_ino:
            os.unlink(path)
    except OSError:
        pass  # held after all, or gone: not ours to remove
    finally:
        os.close(fd)


@dataclass
class _Held:
    """A ledger entry of ours: its name and the descriptor whose flock keeps it live."""

    path: Path
    fd: int

    def drop(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        os.close(self.fd)  # the flock goes with it


@dataclass(frozen=True)
class Grant:
    """The outcome of one try: the devices given, or, while waiting, how many are free and how
    many live tickets are ahead of this job's for any of its devices."""

    devices: list[str] | None
    free: int
    ahead: int = 0


def _counted(number: int, noun: str) -> str:
    # core.units.count's rule, kept here: this module loads on the standard library alone.
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def waiting_message(count: int, grant: Grant) -> str:
    """Why a job still waits: "waiting for 1 GPU: 2 jobs ahead" (or next in line, N free)."""
    wanted = f"waiting for {_counted(count, 'GPU')}"
    if grant.ahead:
        return f"{wanted}: {_counted(grant.ahead, 'job')} ahead"
    return f"{wanted}: next in line, {grant.free} free"


@dataclass
class GpuLedger:
    """One supervisor's view of the machine's GPU ledger; it holds its entries' flocks."""

    folder: Path
    _waiter: _Held | None = None
    _claims: list[_Held] = field(default_factory=list)

    def _create(self, name: str, content: dict[str, object]) -> _Held | None:
        """A new entry of ours, flock-held; None when the name is taken."""
        path = self.folder / name
        try:
            flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(path, flags, 0o644)
        except FileExistsError:
            return None
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.fchmod(fd, 0o644)  # readable for others' probes, whatever the umask
        os.write(fd, json.dumps(content).encode())
        held = _Held(path, fd)
        try:
            same = os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if not same:  # removed as stale before we held it: not ours any more
            held.drop()
            return None
        return held

    def _entries(self, prefix: str) -> list[tuple[str, Path]]:
        """Live entries with this prefix (sorted by name) other than ours; stale entries of this
        user are removed on the way."""
        mine = {held.path.name for held in self._claims}
        if self._waiter is not None:
            mine.add(self._waiter.path.name)
        live = []
        for name in sorted(os.listdir(self.folder)):
            if not name.startswith(prefix) or name in mine:
                continue
            path = self.folder / name
            state = _probe(path)
            if state:
                live.append((name, path))
            elif state is False:
                _remove_if_stale_and_mine(path)
        return live

    def _held_devices(self) -> set[str]:
        return {
            name[len(_CLAIM_PREFIX) :].rpartition(".")[0]
            for name, _ in self._entries(_CLAIM_PREFIX)
        }

    def _ahead(self, devices: list[str]) -> int:
        """Live tickets older than ours that want any of ``devices``."""
        assert self._waiter is not None
        mine = self._waiter.path.name
        wanted = set(devices)
        ahead = 0
        for name, path in self._entries(_WAIT_PREFIX):
            if name >= mine:
                break
            try:
                theirs = json.loads(path.read_text()).get("devices", [])
            except (OSError, ValueError, AttributeError):
                continue
            if isinstance(theirs, list) and wanted.intersection(map(str, theirs)):
                ahead += 1
        return ahead

    def _claim(self, device: str, job_id: str) -> bool:
        part = _device_part(device)
        held = self._create(
            f"{_CLAIM_PREFIX}{part}.{secrets.token_hex(8)}",
            {"device": device, "pid": os.getpid(), "job_id": job_id},
        )
        if held is None:
            return False
        self._claims.append(held)
        # Look again now that ours is visible: a claimant racing us either sees ours or is seen.
        if part in self._held_devices():
            self._claims.remove(held)
            held.drop()
            return False
        return True

    def try_acquire(self, job_id: str, count: int, devices: list[str]) -> Grant:
        """Give ``count`` of ``devices`` to the job if it is first in line and they are free;
        otherwise keep (or put) it in line."""
        check_ledger_dir(self.folder)
        while self._waiter is None:
            self._waiter = self._create(
                f"{_WAIT_PREFIX}{time.time_ns():020d}.{secrets.token_hex(8)}",
                {"devices": devices, "gpus": count, "pid": os.getpid(), "job_id": job_id},
            )
        held = self._held_devices()
        free = [device for device in devices if _device_part(device) not in held]
        ahead = self._ahead(devices)
        if len(free) < count or ahead:
            return Grant(devices=None, free=len(free), ahead=ahead)
        granted: list[str] = []
        for device in free:
            if len(granted) == count:
                break
            if self._claim(device, job_id):
                granted.append(device)
        if len(granted) < count:  # lost a race: give back what we got, keep our place in line
            self._drop_claims()
            return Grant(devices=None, free=len(free) - 1)
        self._waiter.drop()
        self._waiter = None
        return Grant(devices=granted, free=len(free) - count)

    def _drop_claims(self) -> None:
        for held in self._claims:
            held.drop()
        self._claims.clear()

    def release(self) -> None:
        """Free the job's GPUs and its place in line."""
        self._drop_claims()
        if self._waiter is not None:
            self._waiter.drop()
            self._waiter = None
