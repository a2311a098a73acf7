"""Safe extraction of one verified ``tar.zst`` layer into an empty target folder.

Nothing is written outside the target, whatever the archive holds:

- names that are absolute or hold a ``..`` component are refused;
- device files, FIFOs and sparse or unknown entry types are refused;
- hard links must name a regular file extracted earlier from the same archive;
- symbolic links are created only after every file and folder is written (so no write can go
  through one), and each must then resolve inside the target, link chains included. The one
  deliberate exception is a venv's interpreter link (``bin/python*``), which points at the base
  interpreter by absolute path and is rewritten by the relocation anyway;
- an entry that would be written through one of the archive's own symlinks is refused;
- names deeper than ``MAX_DEPTH`` folders or longer than ``MAX_NAME_BYTES`` (entry_names.py)
  are refused;
- a layer that writes more file bytes than its manifest's ``unpacked_size`` is corrupt.

A refused archive leaves the target empty again, and the error names the entry.

The checks are j2c's own: tarfile's extraction filters are not used, because their defaults
differ between Python versions (3.14's refuses the venv's absolute interpreter link). tarfile
only parses headers; file data is copied straight from the decompressor, which runs in its own
thread (:mod:`.decompress`) so that decompression and writing overlap. Memory stays bounded:
a few MiB of decompressed data in flight, whatever the layer's size.

File modes (without setuid/setgid/sticky bits) and modification times are kept, so the
bytecode in ``__pycache__`` stays valid; folders always keep owner rwx so the relocation can edit
them. Ownership is not restored: the job's user owns what it extracts.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path

import zstandard

from j2c_server.unpack.decompress import Decompressed
from j2c_server.unpack.entry_names import MAX_NAME_BYTES
from j2c_server.unpack.entry_names import relative_name as _relative_name
from j2c_server.unpack.errors import LayerCorrupt, LocalIOError, UnsafeEntry

MAX_LINK_HOPS = 40
MAX_HEADER_BYTES = 1024 * 1024  # a pax record or GNU long name is read whole into memory
# Deeper or longer names are refused as unsafe: no project needs them, and the kernel (PATH_MAX)
# and recursive tree walks (rmtree, os.walk) fail on them in ways that are not a clear refusal.
_HEADER_TYPES = {
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.SOLARIS_XHDTYPE,
    tarfile.GNUTYPE_LONGNAME,
    tarfile.GNUTYPE_LONGLINK,
}
# A venv's own interpreter links; their target is the base interpreter, outside the venv.
INTERPRETER_LINK = re.compile(r"^bin/python[0-9.]*$")


@dataclass(frozen=True)
class Extracted:
    entries: int
    bytes: int
    interpreter_links: tuple[str, ...]  # relative paths of the allowed bin/python* links


def extract_layer(
    archive: Path, target: Path, *, venv: bool = False, max_bytes: int = 0, into: bool = False
) -> Extracted:
    """Extract ``archive`` (verified tar.zst) into ``target``, which must be absent or empty;
    with ``into`` (a later part of a code layer), ``target`` may hold the earlier parts: their
    folders are reused (a real folder only: a symlink or file in the way fails the write), and
    a refused archive leaves what they wrote (the job stops anyway).

    ``venv`` allows the interpreter links of a venv layer; ``max_bytes`` (when not 0) is the
    manifest's unpacked size, which the files written may not exceed. Raises UnsafeEntry (naming
    the entry), LayerCorrupt (not a tar.zst, or larger than stated) or LocalIOError (the target
    cannot be written).
    """
    _prepare_empty(target, into=into)
    clear = _clear if not into else lambda _target: None
    try:
        with open(archive, "rb") as compressed, Decompressed(compressed) as stream:
            return _Extraction(stream, target, venv=venv, max_bytes=max_bytes).run()
    except (UnsafeEntry, LayerCorrupt):
        clear(target)
        raise
    except (tarfile.TarError, zstandard.ZstdError, ValueError, OverflowError) as exc:
        clear(target)
        raise LayerCorrupt(f"{archive.name} is not a valid tar.zst layer: {exc}") from None
    except OSError as exc:
        clear(target)
        raise LocalIOError(
            f"cannot extract into {target}: {exc.strerror or exc} ({exc.filename or target})"
        ) from None


class _Extraction:
    """One pass over the archive's members, then the deferred links and folder metadata."""

    def __init__(self, stream: Decompressed, target: Path, *, venv: bool, max_bytes: int) -> None:
        self.stream = stream
        self.root = str(target)
        self.venv = venv
        self.max_bytes = max_bytes
        self.known_dirs: set[str] = {self.root}
        self.dirs: dict[str, tarfile.TarInfo] = {}
        self.links: dict[str, str] = {}  # relative path -> link target, created at the end
        self.entries = 0
        self.bytes = 0

    def run(self) -> Extracted:
        with tarfile.open(  # type: ignore[call-overload]
            fileobj=self.stream, mode="r:", tarinfo=_BoundedHeaders
        ) as tar:
            while (member := tar.next()) is not None:
                tar.members.clear()  # tarfile keeps every header otherwise: memory grows
                self._member(member)
                self.entries += 1
        allowed = self._create_links()
        self._finish_dirs()
        return Extracted(self.entries, self.bytes, allowed)

    # ------------------------------------------------------------------ one member

    def _member(self, member: tarfile.TarInfo) -> None:
        rel = _relative_name(member.name, member.name)
        if rel == "":
            return  # the archive's root folder ("." or "./"): the target itself
        self._refuse_through_links(rel, member.name)
        path = os.path.join(self.root, rel)
        if member.isdir():
            self.links.pop(rel, None)
            self._ensure_dir(path)
            self.dirs[path] = member
        elif member.issparse():
            raise UnsafeEntry(f"entry {member.name!r} is a sparse file, which j2c never writes")
        elif member.isreg():
            self.links.pop(rel, None)
            self._write_file(member, path)
        elif member.issym():
            if len(member.linkname.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
                raise UnsafeEntry(f"entry {member.name!r} is a symlink with a too long target")
            self._ensure_dir(os.path.dirname(path))
            self.links[rel] = member.linkname
        elif member.islnk():
            self.links.pop(rel, None)
            self._hard_link(member, rel, path)
        elif member.ischr() or member.isblk():
            raise UnsafeEntry(f"entry {member.name!r} is a device file")
        elif member.isfifo():
            raise UnsafeEntry(f"entry {member.name!r} is a FIFO")
        else:
            raise UnsafeEntry(f"entry {member.name!r} has an unsupported type {member.type!r}")

    def _refuse_through_links(self, rel: str, name: str) -> None:
        """An entry below one of the archive's symlinks would be written through it."""
        if not self.links:
            return
        parts = rel.split("/")
        for depth in range(1, len(parts)):
            prefix = "/".join(parts[:depth])
            if prefix in self.links:
                raise UnsafeEntry(f"entry {name!r} would be written through the symlink {prefix!r}")

    def _ensure_dir(self, path: str) -> None:
        """Create ``path`` and its missing parents inside the target (a loop: os.makedirs
        recurses once per level)."""
        missing = []
        while path not in self.known_dirs:
            missing.append(path)
            path = os.path.dirname(path)
        for folder in reversed(missing):
            try:
                os.mkdir(folder, 0o755)
            except FileExistsError:
                if not os.path.isdir(folder) or os.path.islink(folder):
                    # A file of an earlier entry, or (``into``) an earlier part's symlink.
                    rel = os.path.relpath(folder, self.root)
                    raise UnsafeEntry(
                        f"folder {rel!r} is a symlink or file already in the target (an "
                        "earlier entry, or an earlier part of the layer): not written through"
                    ) from None
            self.known_dirs.add(folder)

    def _write_file(self, member: tarfile.TarInfo, path: str) -> None:
        if self.max_bytes and self.bytes + member.size > self.max_bytes:
            raise LayerCorrupt(
                f"the layer holds more than the {self.max_bytes} bytes of files its manifest "
                f"states (at entry {member.name!r})"
            )
        self._ensure_dir(os.path.dirname(path))
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(path, flags, 0o600)
        except FileExistsError:  # a later entry of the same name wins, as with tar
            _remove(path)
            fd = os.open(path, flags, 0o600)
        try:
            self.stream.skip_to(member.offset_data)
            self.stream.copy_to(fd, member.size)
            os.fchmod(fd, member.mode & 0o777)
            mtime_ns = int(member.mtime * 1_000_000_000)
            os.utime(fd, ns=(mtime_ns, mtime_ns))
        finally:
            os.close(fd)
        self.bytes += member.size

    def _hard_link(self, member: tarfile.TarInfo, rel: str, path: str) -> None:
        source_rel = _relative_name(member.linkname, member.name)
        self._refuse_through_links(source_rel + "/", member.name)
        source = os.path.join(self.root, source_rel)
        try:
            is_file = source_rel != "" and stat.S_ISREG(os.lstat(source).st_mode)
        except FileNotFoundError:
            is_file = False
        if not is_file:
            raise UnsafeEntry(
                f"entry {member.name!r} is a hard link to {member.linkname!r}, "
                "which is not a regular file extracted before it"
            )
        self._ensure_dir(os.path.dirname(path))
        if os.path.lexists(path):
            _remove(path)
        os.link(source, path, follow_symlinks=False)

    # ------------------------------------------------------------------ at the end

    def _create_links(self) -> tuple[str, ...]:
        allowed = tuple(
            rel
            for rel, target in self.links.items()
            if self.venv and INTERPRETER_LINK.match(rel) and not _inside(rel, target)
        )
        for rel, target in self.links.items():
            path = os.path.join(self.root, rel)
            if os.path.isdir(path) and not os.path.islink(path):
                raise UnsafeEntry(f"symlink entry {rel!r} would replace a folder")
            if os.path.lexists(path):
                _remove(path)
            os.symlink(target, path)
        for rel, target in self.links.items():
            if rel not in allowed and not self._resolves_inside(rel, set(allowed)):
                raise UnsafeEntry(
                    f"entry {rel!r} is a symlink to {target!r}, which resolves outside the layer"
                )
        return allowed

    def _resolves_inside(self, rel: str, terminals: set[str]) -> bool:
        """Resolve the link at ``rel`` within the target, following the archive's own links.

        ``terminals`` are the allowed interpreter links: a chain that ends on one is inside
        (``bin/python3 -> python3.11``), a chain that continues through one is not.
        """
        resolved = rel.split("/")[:-1]
        todo = os.readlink(os.path.join(self.root, rel)).split("/")
        if todo[0] == "":
            return False  # absolute
        hops = 0
        while todo:
            part = todo.pop(0)
            if part in ("", "."):
                continue
            if part == "..":
                if not resolved:
                    return False
                resolved.pop()
                continue
            resolved.append(part)
            current = "/".join(resolved)
            if current in terminals and not todo:
                return True
            path = os.path.join(self.root, current)
            if os.path.islink(path):
                hops += 1
                following = os.readlink(path).split("/")
                if hops > MAX_LINK_HOPS or following[0] == "":
                    return False
                resolved.pop()
                todo = following + todo
        return True

    def _finish_dirs(self) -> None:
        # Deepest first: setting a folder's mtime must come after everything inside is written.
        for path in sorted(self.dirs, key=len, reverse=True):
            if os.path.islink(path) or not os.path.isdir(path):
                continue  # a later entry replaced the folder
            member = self.dirs[path]
            mtime_ns = int(member.mtime * 1_000_000_000)
            os.utime(path, ns=(mtime_ns, mtime_ns), follow_symlinks=False)
            os.chmod(path, (member.mode & 0o777) | 0o700)


class _BoundedHeaders(tarfile.TarInfo):
    """tarfile reads extended headers whole: a huge one must not exhaust memory."""

    def _proc_member(self, archive: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type in _HEADER_TYPES and self.size > MAX_HEADER_BYTES:
            raise UnsafeEntry(
                f"the archive has a {self.size}-byte extended header before entry "
                f"{self.name!r} (at most {MAX_HEADER_BYTES} are read)"
            )
        return super()._proc_member(archive)  # type: ignore[misc,no-any-return]


def _inside(rel: str, link_target: str) -> bool:
    """Lexically: does a link at ``rel`` to ``link_target`` stay inside the target?"""
    if link_target.startswith("/"):
        return False
    joined = os.path.normpath(os.path.join(os.path.dirname(rel), link_target))
    return joined != ".." and not joined.startswith("../")


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def _prepare_empty(target: Path, *, into: bool = False) -> None:
    try:
        target.mkdir(parents=True, exist_ok=True)
        if not into and any(target.iterdir()):
            raise LocalIOError(f"cannot extract into {target}: it is not empty")
    except OSError as exc:
        raise LocalIOError(f"cannot create {target}: {exc.strerror or exc}") from None


def _clear(target: Path) -> None:
    """Remove what a refused or failed extraction wrote (never following its links)."""
    if not target.is_dir():
        return
    for child in target.iterdir():
        _remove(str(child))
