"""j2c-unpack's own folder: blobs, relocated layers and (by default) the job's outputs.

- ``--workdir DIR``: created or adopted, and kept after the job, so a restarted job reuses its
  verified blobs. A marker file says the folder is j2c-unpack's: a folder that is not empty and
  has no marker is refused rather than touched.
- no ``--workdir``: a fresh temporary folder (``$TMPDIR/j2c-*``), removed when the job ends,
  except an ``outputs`` folder that holds files (and everything, with ``--no-run``, which exists
  to leave a prepared job behind).

Either way the folder is locked (``flock`` on the marker) while j2c-unpack uses it: two jobs
sharing one workdir would replace each other's venv mid-run, so the second one is refused.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from j2c_server.unpack.errors import LocalIOError
from j2c_server.unpack.log import say

MARKER = ".j2c-unpack-workdir"


@contextlib.contextmanager
def workdir_in_use(chosen: Path | None, *, keep: bool = False) -> Iterator[Path]:
    """The workdir, locked for this process while the block runs (see the module's rules)."""
    temporary = chosen is None
    try:
        path = _adopt(chosen) if chosen is not None else Path(tempfile.mkdtemp(prefix="j2c-"))
        lock = _lock(path)
    except OSError as exc:
        raise LocalIOError(
            f"cannot use {chosen or 'a temporary folder'} as the workdir: {exc.strerror or exc}",
            field="workdir",
        ) from None
    try:
        yield path
    finally:
        os.close(lock)
        if temporary and not keep:
            _remove_temporary(path)


def _adopt(chosen: Path) -> Path:
    path = Path(os.path.abspath(chosen))
    path.mkdir(parents=True, exist_ok=True)
    if not (path / MARKER).exists() and any(path.iterdir()):
        raise LocalIOError(
            f"the workdir {path} is not empty and was not made by j2c-unpack",
            field="workdir",
            hint="choose an empty or new folder with --workdir",
        )
    return path


def _lock(path: Path) -> int:
    fd = os.open(path / MARKER, os.O_WRONLY | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise LocalIOError(
            f"the workdir {path} is in use by another j2c-unpack",
            field="workdir",
            hint="give each job its own --workdir",
        ) from None
    return fd


def _remove_temporary(path: Path) -> None:
    outputs = path / "outputs"
    kept = outputs.is_dir() and any(outputs.iterdir())
    for child in path.iterdir():
        if not (kept and child == outputs):
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)
    if kept:
        say("cleaning up", f"the job's outputs stay in {outputs}")
    else:
        path.rmdir()
