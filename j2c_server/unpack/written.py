"""What the job wrote into its working copy of the project: the files it created or changed.

Right before the entry point starts, :func:`take_snapshot` records each regular file of the code
folder by (size, mtime_ns, inode), one ``lstat`` each (nothing is read or hashed). Afterwards (and
at every periodic sync) :func:`written_files` walks the folder again: a regular file that is new,
or whose record differs, is an output. The rules, the same for every backend:

- skipped folders: the packer's junk folders (``__pycache__``, ``.ipynb_checkpoints``, ``.git``,
  tool caches...), ``.cache``, ``j2c-outputs``, the venv (when it lives in the project) and the
  job's ``$J2C_OUTPUT_DIR`` (uploaded on its own);
- symbolic links are neither followed nor returned;
- secrets never leave: the packer's secret name rules (a file, or a folder above it, named
  ``.env*``, ``id_rsa*``, ``*.pem``...) and its content detector (private keys, cloud and tool
  tokens in small text files) leave a file out, with the reason;
- the project's own ``.gitignore``/``.j2cignore`` do not apply: they say what not to *send*,
  and what they list (``models/``, ``*.ckpt``) is usually exactly what a job produces.

The rules are the packer's, from where both sides read them (:mod:`j2c_server.core.secret_rules`,
standard library only: the packer itself loads pydantic and pathspec, which j2c-unpack must
not); the name patterns are matched here per path component with ``fnmatch``.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from j2c_server.core import secret_rules

EXTRA_SKIPPED_DIRS = frozenset({".cache", "j2c-outputs"})

Snapshot = dict[str, tuple[int, int, int]]


@dataclass(frozen=True)
class Written:
    """One regular file: its name relative to the folder it was found in, and its ``lstat``."""

    name: str
    path: Path
    stat: os.stat_result

    @property
    def key(self) -> tuple[int, int, int]:
        return stat_key(self.stat)


def stat_key(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def take_snapshot(code: Path, skip: tuple[Path, ...] = ()) -> Snapshot:
    """Every regular file under ``code`` (outside the skipped folders) by its stat key."""
    return {name: (st.st_size, st.st_mtime_ns, st.st_ino) for name, _, st in _walk(code, skip)}


def written_files(code: Path, snapshot: Snapshot, skip: tuple[Path, ...] = ()) -> list[Written]:
    """The regular files under ``code`` that are not in ``snapshot`` as they were."""
    return [
        Written(name, Path(path), st)
        for name, path, st in _walk(code, skip)
        if snapshot.get(name) != (st.st_size, st.st_mtime_ns, st.st_ino)
    ]


def every_file(top: Path) -> list[Written]:
    """Every regular file under ``top`` (the output dir: no folder skipped), never through a
    symlink."""
    return [Written(name, Path(path), st) for name, path, st in _walk(top, (), frozenset())]


def _walk(
    top: Path, skip: tuple[Path, ...], skipped_dirs: frozenset[str] | None = None
) -> Iterator[tuple[str, str, os.stat_result]]:
    """(name relative to ``top``, path, lstat) of each regular file: one ``lstat`` each;
    ``skipped_dirs``: folder names not entered (default: the working copy's rules)."""
    if skipped_dirs is None:
        skipped_dirs = _rules().skipped_dirs
    skipped = {str(path) for path in skip}
    pending = [(str(top), "")]
    while pending:
        folder, prefix = pending.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue  # vanished or unreadable meanwhile: nothing of it to return
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                if entry.name not in skipped_dirs and entry.path not in skipped:
                    pending.append((entry.path, f"{prefix}{entry.name}/"))
            elif stat.S_ISREG(st.st_mode):
                yield prefix + entry.name, entry.path, st


def secret_reason(item: Written) -> str | None:
    """Why ``item`` is a secret that must not leave the job (by name, then by content)."""
    pattern = _rules().secret_pattern(item.name)
    if pattern is not None:
        return f"a secret by its name ({pattern})"
    if not secret_rules.should_read(item.path.name, item.stat.st_size):
        return None
    try:
        data = secret_rules.read_small(str(item.path), item.stat)
    except OSError:
        return None
    found = secret_rules.detect(data) if data is not None else None
    return f"a secret by its content ({found})" if found else None


class _Rules:
    """The packer's name lists, matched one path component at a time."""

    def __init__(self, lists: dict[str, frozenset[str] | tuple[str, ...]]) -> None:
        self.skipped_dirs = frozenset(lists["JUNK_DIRS"]) | EXTRA_SKIPPED_DIRS
        dir_too = frozenset(lists["DIR_TOO"])
        self.file_names: list[str] = []
        self.dir_names: list[tuple[str, str]] = []  # (name pattern, as the packer wrote it)
        self.paths: list[tuple[str, list[str], bool]] = []  # (pattern, parts, a folder)
        for pattern in (*lists["SECRET_PATTERNS"], *lists["KEY_FILE_PATTERNS"]):
            body = pattern.rstrip("/")
            folder = pattern.endswith("/")
            if "/" in body:
                self.paths.append((pattern, body.removeprefix("**/").split("/"), folder))
                continue
            if not folder:
                self.file_names.append(body)
            if folder or pattern in dir_too:
                self.dir_names.append((body, pattern))

    def secret_pattern(self, name: str) -> str | None:
        parts = name.split("/")
        folders, file_name = parts[:-1], parts[-1]
        for pattern in self.file_names:
            if fnmatch.fnmatchcase(file_name, pattern):
                return pattern
        for folder in folders:
            for glob, pattern in self.dir_names:
                if fnmatch.fnmatchcase(folder, glob):
                    return pattern
        for pattern, wanted, of_folders in self.paths:
            # A folder pattern matches a run of parent folders; a file one the path's end.
            ends = range(len(wanted), len(folders) + 1) if of_folders else [len(parts)]
            for end in ends:
                window = parts[end - len(wanted) : end]
                pairs = zip(window, wanted, strict=True)
                if all(fnmatch.fnmatchcase(part, want) for part, want in pairs):
                    return pattern
        return None


@functools.cache
def _rules() -> _Rules:
    return _Rules(
        {
            "JUNK_DIRS": secret_rules.JUNK_DIRS,
            "DIR_TOO": secret_rules.DIR_TOO,
            "SECRET_PATTERNS": secret_rules.SECRET_PATTERNS,
            "KEY_FILE_PATTERNS": secret_rules.KEY_FILE_PATTERNS,
        }
    )
