"""Private folders and files: what j2c keeps for one user is readable by that user alone.

The data dir (registry, layer cache, embedded store, local runs, watcher logs) holds request
environments, logs and the user's code. Every folder j2c creates there is 0700 and every file
0600, whatever the umask; folders and files made by an older j2c with wider modes are tightened
when they are opened again. Every place that creates something there goes through this module,
so the modes are decided once.

Standard library only: the local scheduler's supervisor and ``j2c-unpack`` import it.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


def _tighten(path: Path | str, mode: int) -> None:
    """Take group and other bits off ``path`` when it is ours and has them."""
    with contextlib.suppress(FileNotFoundError, PermissionError):
        info = os.stat(path)
        if info.st_uid == os.getuid() and info.st_mode & 0o777 & ~mode:
            os.chmod(path, mode)


def private_dir(path: Path) -> Path:
    """``path`` as a folder: created 0700 with any missing parents (each 0700 too), or, when it
    exists and is ours, tightened to 0700. Returns ``path``."""
    missing: list[Path] = []
    here = path
    while not here.is_dir():
        missing.append(here)
        if here.parent == here:
            break
        here = here.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, DIR_MODE)
        except FileExistsError:
            if not folder.is_dir():
                raise
            continue  # another process made it meanwhile: tighten below
        os.chmod(folder, DIR_MODE)  # the umask may have taken bits off the owner's
    if not missing:
        _tighten(path, DIR_MODE)
    return path


def private_file(path: Path) -> Path:
    """``path`` created empty (0600) when missing, else tightened to 0600 when it is ours."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, FILE_MODE))
    tighten_file(path)
    return path


def tighten_file(path: Path | str) -> None:
    """Take group and other bits off an existing file of ours (no-op when missing)."""
    _tighten(path, FILE_MODE)


def private_opener(path: str | os.PathLike[str], flags: int) -> int:
    """An ``opener`` for :func:`open`: a file it creates is 0600 (``open(p, "ab",
    opener=private_opener)``). An existing file keeps its mode."""
    return os.open(path, flags | os.O_CLOEXEC, FILE_MODE)


def write_private_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (replacing its content); a new file is 0600."""
    with open(path, "w", opener=private_opener) as handle:
        handle.write(text)
