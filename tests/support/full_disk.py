"""A disk that runs full on demand: a size-limited tmpfs mounted on a folder, and a ballast file
that takes every free byte of it until removed. Used by the tests of what a full data dir does
and by the chaos soak's ``disk_full`` fault (benchmarks/soak_legs.py).

Mounting needs root (``CAP_SYS_ADMIN``); ``mount_tmpfs`` returns why it cannot instead, and
``small_disk`` (for tests) skips with that reason (fails under CI: tests/support/ci.py).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tests.support.ci import engine_missing


def mount_tmpfs(folder: Path, size_mb: float) -> str | None:
    """Mount a tmpfs of ``size_mb`` on ``folder`` (made if missing, mode 0700); None when done,
    else why it cannot be mounted here."""
    if os.geteuid() != 0:
        return "mounting a size-limited tmpfs needs root"
    folder.mkdir(parents=True, exist_ok=True)
    size_kb = max(int(size_mb * 1024), 64)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_kb}k,mode=0700", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    return None if done.returncode == 0 else f"mount -t tmpfs failed: {done.stderr.strip()}"


def unmount(folder: Path) -> None:
    """Unmount (lazily: a process still inside lets go later)."""
    subprocess.run(["umount", "--lazy", str(folder)], check=False, capture_output=True)


def free_bytes(folder: Path) -> int:
    stat = os.statvfs(folder)
    return stat.f_bavail * stat.f_frsize


def take_all_space(ballast: Path, *, leave: int = 0) -> int:
    """Write ``ballast`` until its file system has no byte left (about ``leave`` bytes left,
    when given); the bytes it took. Removing the file gives them back."""
    with open(ballast, "wb") as handle:
        fd = handle.fileno()
        with contextlib.suppress(OSError):  # what allocation leaves over is written below
            os.posix_fallocate(fd, 0, max(free_bytes(ballast.parent) - leave, 1))
        taken = os.lseek(fd, 0, os.SEEK_END)
        if leave:
            return taken
        chunk = b"\0" * 4096
        with contextlib.suppress(OSError):  # ENOSPC: full
            while True:
                taken += os.write(fd, chunk)
    return taken


@contextlib.contextmanager
def small_disk(folder: Path, size_mb: float) -> Iterator[Path]:
    """``folder`` on a tmpfs of ``size_mb`` for the block (the test skipped, saying why, where
    none can be mounted; failed under CI); its ballast removed and the tmpfs unmounted at the
    end."""
    if (reason := mount_tmpfs(folder, size_mb)) is not None:
        engine_missing(f"no small disk to fill: {reason}")
    try:
        yield folder
    finally:
        (folder / "ballast").unlink(missing_ok=True)
        unmount(folder)
