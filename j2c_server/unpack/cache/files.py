"""The cache's file trees: walked in order, fingerprinted, sealed read-only, copied or linked
into a job's home, removed although read-only. Plain file operations, no locking (that is
:mod:`.node`'s)."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from j2c_server.unpack.errors import LocalIOError

_OPEN_FLAGS = os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class Refused(Exception):
    """A cache entry that must not be used (someone else's, or writable): built again."""


def unsafe(st: os.stat_result, owners: frozenset[int] | set[int], *, folder: bool) -> str | None:
    """Why an entry, lock or plan of the cache must not be used (None: it may): someone
    else's, a symlink, not a folder when one is needed, or writable by group or others."""
    if st.st_uid not in owners:
        return f"belongs to uid {st.st_uid}"
    if stat.S_ISLNK(st.st_mode):
        return "is a symlink"
    if folder and not stat.S_ISDIR(st.st_mode):
        return "is not a folder"
    if st.st_mode & 0o022:
        return "is writable by group or others"
    return None


def write_json(path: Path, data: dict[str, object]) -> None:
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _OPEN_FLAGS, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle)
    os.replace(temporary, path)


def walk(root: Path) -> Iterator[tuple[str, os.DirEntry[str]]]:
    """Every entry under ``root`` (relative path, entry), sorted, without following links."""
    todo = [""]
    while todo:
        rel = todo.pop()
        with os.scandir(os.path.join(root, rel)) as listing:
            children = sorted(listing, key=lambda e: e.name)
        for child in children:
            child_rel = f"{rel}/{child.name}" if rel else child.name
            yield child_rel, child
            if child.is_dir(follow_symlinks=False):
                todo.append(child_rel)


def fingerprint(tree: Path, owners: frozenset[int] | set[int]) -> str:
    """sha256 over every entry's name, type, mode, size, mtime, inode and ctime (a link's
    target). The ctime is the kernel's: a change to an entry after it was sealed (its content
    rewritten in place and its mtime set back, a chmod, a hard link made to it) moves it, and
    no process but root's (changing the clock) can set it back; so nothing may make hard links
    to a sealed tree (:func:`copy_tree` copies). Raises Refused for an entry that belongs to
    someone else or that group or others could write.

    :func:`walk`'s order, written out in one loop: a warm start runs this over every file of
    the venv (tens of thousands), so no generator and one hash update."""
    lines: list[str] = []
    todo = [""]
    while todo:
        rel = todo.pop()
        with os.scandir(os.path.join(tree, rel) if rel else tree) as listing:
            children = sorted(listing, key=lambda e: e.name)
        prefix = f"{rel}/" if rel else ""
        for child in children:
            child_rel = prefix + child.name
            st = child.stat(follow_symlinks=False)
            if st.st_uid not in owners:
                raise Refused(f"{child_rel} belongs to uid {st.st_uid}")
            mode = st.st_mode
            if stat.S_ISLNK(mode):
                lines.append(f"{child_rel}\0L\0{os.readlink(child.path)}\n")
                continue
            if mode & 0o222:
                raise Refused(f"{child_rel} is writable")
            lines.append(
                f"{child_rel}\0{mode}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}"
                f"\0{st.st_ctime_ns}\n"
            )
            if stat.S_ISDIR(mode):
                todo.append(child_rel)
    return hashlib.sha256("".join(lines).encode("utf-8", "surrogateescape")).hexdigest()


def read_only(tree: Path) -> None:
    """No write bits anywhere (folders last, deepest first): the cache's files are shared."""
    folders = [tree]
    for _, entry in walk(tree):
        if entry.is_dir(follow_symlinks=False):
            folders.append(Path(entry.path))
        elif entry.is_file(follow_symlinks=False):
            os.chmod(entry.path, stat.S_IMODE(entry.stat(follow_symlinks=False).st_mode) & ~0o222)
    for folder in reversed(folders):
        os.chmod(folder, stat.S_IMODE(os.lstat(folder).st_mode) & ~0o222)


def copy_tree(source: Path, target: Path) -> int:
    """``source``'s tree copied into ``target`` (absent or empty): files with owner write (the
    job's own copy; reflinks where the filesystem has them), folders writable by their owner,
    symlinks recreated. Never hard links: a link would move the source file's ctime, which its
    fingerprint holds. The number of files."""
    target.mkdir(parents=True, exist_ok=True)
    if any(target.iterdir()):
        raise LocalIOError(f"cannot materialise a cached layer into {target}: it is not empty")
    files = 0
    folders: list[tuple[str, int]] = []
    try:
        for rel, entry in walk(source):
            path = os.path.join(target, rel)
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                os.mkdir(path, 0o700)
                folders.append((path, stat.S_IMODE(st.st_mode) | 0o700))
            elif stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(entry.path), path)
            else:
                files += 1
                copy_file(entry.path, path, st)
        for path, mode in reversed(folders):
            os.chmod(path, mode)
    except OSError as exc:
        raise LocalIOError(
            f"cannot materialise a cached layer into {target}: {exc.strerror or exc} "
            f"({exc.filename or target})"
        ) from None
    return files


def link_top(tree: Path, home: Path) -> int:
    """``home`` (absent or empty) given one symlink per top-level entry of ``tree``, pointing
    at it: the tree is used where it is, seen at ``home``. A handful of syscalls whatever the
    tree's size (a hard-linked copy is one or two per file, and across filesystems, as from a
    container's bind-mounted cache into its own root, a copy of every byte). The number of
    links."""
    try:
        home.mkdir(parents=True, exist_ok=True)
        if any(home.iterdir()):
            raise LocalIOError(f"cannot materialise a cached layer into {home}: it is not empty")
        names = sorted(os.listdir(tree))
        for name in names:
            os.symlink(os.path.join(tree, name), os.path.join(home, name))
    except OSError as exc:
        raise LocalIOError(
            f"cannot materialise a cached layer into {home}: {exc.strerror or exc} "
            f"({exc.filename or home})"
        ) from None
    return len(names)


def copy_file(source: str, target: str, st: os.stat_result) -> None:
    with open(source, "rb") as src:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _OPEN_FLAGS, 0o600)
        try:
            left = st.st_size
            try:
                while left > 0:  # reflinks or in-kernel copies where the filesystem can
                    sent = os.copy_file_range(src.fileno(), fd, left)
                    if sent == 0:
                        break
                    left -= sent
            except OSError:
                left = -1
            if left != 0:
                os.ftruncate(fd, 0)
                os.lseek(fd, 0, os.SEEK_SET)
                src.seek(0)
                while chunk := src.read(1024 * 1024):
                    os.write(fd, chunk)
            os.fchmod(fd, stat.S_IMODE(st.st_mode) | 0o200)
            os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))
        finally:
            os.close(fd)


def rmtree(path: Path) -> None:
    """rmtree of a tree whose folders are read-only."""

    def writable_parent(function: Callable[[str], object], name: str, _: object) -> None:
        os.chmod(os.path.dirname(name), stat.S_IRWXU)
        function(name)

    if os.path.lexists(path):
        shutil.rmtree(path, onerror=writable_parent)
