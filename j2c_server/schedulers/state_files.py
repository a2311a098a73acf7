"""Small files that hold a job's state on this machine, shared by the backends that run jobs
here (``local``'s supervisors, ``container``'s GPU waiters and collected containers): written
atomically, read back, locked across processes, and a process told apart from a reused PID.

Imported by detached supervisors and waiters, so it stays on the standard library (and
:mod:`j2c_server.core`).

A record that is a job's only account once its writer is gone (the supervisor's ``job.json`` and
``exit.json``, a collected container's ``final.json``) is written with ``write_record``: when the
data dir's disk is full it is written again, every 0.1 s doubling to 2 s, for up to
``FULL_DISK_PATIENCE_S`` (a full disk is often a moment: a checkpoint, a download). A writer that
gave up at once left its job ``lost``, or its container on the engine, for a moment without space.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from j2c_server.core.backoff import Backoff, retry_sync


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Readers see the old content or the new, never a torn file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(data, handle)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


FULL_DISK_PATIENCE_S = 600.0
_FULL_DISK = Backoff(
    retryable=lambda exc: isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT),
    on_retry=lambda _exc, _attempt, _delay: None,  # nowhere to say it: the disk is full
    attempts=int(FULL_DISK_PATIENCE_S / 2) + 5,  # 0.1 s doubling to 2 s: about the patience
    base_s=0.1,
    max_s=2.0,
)


def write_record(path: Path, data: dict[str, Any]) -> None:
    """``write_json_atomic``, written again while the disk is full (see the module docstring)."""
    retry_sync(lambda: write_json_atomic(path, data), _FULL_DISK)


def read_json(path: Path) -> dict[str, Any] | None:
    """The file's mapping, or None when it does not exist (yet)."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    return data if isinstance(data, dict) else None


@contextlib.contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Hold an flock on ``path`` (created if missing) across processes for the block."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def is_held(lock_path: Path) -> bool:
    """True while some process holds ``lock_path`` exclusively (its supervisor is alive).

    Probing takes a shared lock, so two probes never mistake each other for a supervisor.
    """
    try:
        fd = os.open(lock_path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops the probe's shared lock, if it got one
    return False


def process_start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux), or None when unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count fields after its ')'.
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[19])


def same_process(pid: int, start_time: int | None) -> bool:
    """True when ``pid`` is still the process that was recorded (not a reused PID)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else: only the start time can tell
    if start_time is None:
        return True
    return process_start_time(pid) == start_time
