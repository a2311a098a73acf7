"""A kernel watch on a folder tree: has anything under it changed since the watch was set?

Long-lived processes (the server's and a kernel's pack workers) keep a venv's scan between sends
and ask this watch, instead of walking 10k+ entries again, whether the scan still holds. The
answer must never be a wrong "unchanged" (that would ship stale files), so the watch says
"changed" whenever it cannot be sure:

- Linux inotify only (``ctypes``, no dependency); elsewhere there is no watch and callers scan;
- local file systems only (read from ``/proc/self/mountinfo``): a network file system's inotify
  does not see writes made on another machine (an NFS home edited from another node);
- any event at all, a queue overflow, a watch the kernel dropped, or the root path now naming
  another folder (the tree moved away under a parent that was replaced) count as a change;
- every folder is watched *before* it is listed, and the caller scans only after the whole
  tree is watched, so nothing can change between the scan and the watch unseen.

Not seen by inotify, by the kernel's design: writes through a shared ``mmap`` (documented in
``docs/packing.md``; installers write venvs with plain writes). Callers bound that with an age
after which they scan anyway.
"""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

# <sys/inotify.h>
_IN_MODIFY = 0x002
_IN_ATTRIB = 0x004
_IN_CLOSE_WRITE = 0x008
_IN_MOVED_FROM = 0x040
_IN_MOVED_TO = 0x080
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_IN_ONLYDIR = 0x01000000
_IN_DONT_FOLLOW = 0x02000000
_MASK = (
    _IN_MODIFY
    | _IN_ATTRIB
    | _IN_CLOSE_WRITE
    | _IN_MOVED_FROM
    | _IN_MOVED_TO
    | _IN_CREATE
    | _IN_DELETE
    | _IN_DELETE_SELF
    | _IN_MOVE_SELF
    | _IN_ONLYDIR
    | _IN_DONT_FOLLOW
)
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = getattr(os, "O_CLOEXEC", 0)

# File systems whose inotify sees every write to them made on this machine, and no other
# machine writes them.
LOCAL_FILE_SYSTEMS = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "overlay", "zfs", "f2fs", "bcachefs"}
)
MAX_WATCHED_FOLDERS = 50_000  # a bigger tree is scanned each time (the user's watch budget)


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _libc()


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal."""
    return field.encode().decode("unicode_escape") if "\\" in field else field


def file_system_type(path: Path) -> str | None:
    """The type of the mount holding ``path`` (a resolved path), from the longest mount point
    that contains it; None when mountinfo cannot be read."""
    best, best_type = "", None
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    target = str(path)
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or not tail:
            continue
        point = _unescape(fields[4])
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, best_type = point, tail[0]
    return best_type


class TreeWatch:
    """One inotify instance watching every folder of one tree (symlinks not followed)."""

    def __init__(self, fd: int, root: Path, identity: tuple[int, int]) -> None:
        self._fd = fd
        self.root = root
        self._identity = identity
        self._dirty = False

    @classmethod
    def start(cls, root: Path) -> TreeWatch | None:
        """Watch ``root``'s tree, or None where no watch can be trusted (see the module's
        docstring); the caller then scans every time."""
        if _LIBC is None:
            return None
        try:
            resolved = root.resolve(strict=True)
            st = os.stat(resolved)
        except OSError:
            return None
        if file_system_type(resolved) not in LOCAL_FILE_SYSTEMS:
            return None
        fd = _LIBC.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            return None  # the user's inotify instances are used up
        watch = cls(fd, resolved, (st.st_dev, st.st_ino))
        if not watch._add_tree():
            watch.close()
            return None
        return watch

    def _add_tree(self) -> bool:
        assert _LIBC is not None
        stack, added = [str(self.root)], 0
        while stack:
            folder = stack.pop()
            # Watched before listed: a child made after this line is an event, one made before
            # it is in the listing below.
            if _LIBC.inotify_add_watch(self._fd, os.fsencode(folder), _MASK) < 0:
                return False  # over the user's watch limit, or the folder went away
            added += 1
            if added > MAX_WATCHED_FOLDERS:
                return False
            try:
                with os.scandir(folder) as entries:
                    stack += [e.path for e in entries if e.is_dir(follow_symlinks=False)]
            except OSError:
                return False
        return True

    def changed(self) -> bool:
        """Whether anything under the tree may have changed since :meth:`start` (sticky)."""
        if self._dirty:
            return True
        try:
            while os.read(self._fd, 65536):
                self._dirty = True  # any event, IN_Q_OVERFLOW and IN_IGNORED included
        except BlockingIOError:
            pass
        except OSError:
            self._dirty = True
        if not self._dirty:
            try:
                st = os.stat(self.root)
                self._dirty = (st.st_dev, st.st_ino) != self._identity
            except OSError:
                self._dirty = True
        return self._dirty

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
