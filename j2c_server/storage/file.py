"""The embedded ``file://`` object store: a local folder (by default in the Jupyter data dir).

Keys map to paths under the root and cannot leave it. Folders are 0700 and objects 0600
(:mod:`j2c_server.core.file_modes`): the store holds the user's code, so it is theirs alone.
Writes go to
a temp file beside the target and are renamed into place, so readers and concurrent writers of
one key never see a partial object. All file I/O runs in worker threads, never on the event loop.

With ``storage.shared`` every object is readable by other uids (0644 in 0755 folders) and blobs
are copied, never linked from the private layer cache; an object written while the store was
private (0600) counts as absent, so the next send that reuses it writes a readable copy over it
(switching a store to shared loses nothing, and the layer cache's files stay private).

A content-addressed file (a layer blob) is hard-linked into the store instead of copied when both
are on one filesystem: no bytes move. That is safe because such files are never modified in
place: the layer cache writes every blob to a new temp file and renames it into place (see
:mod:`j2c_server.pack.fingerprint`). Other keys (job outputs, which a later run may rewrite in
place) are always copied.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path

from j2c_server.core.file_modes import private_dir, tighten_file
from j2c_server.storage.base import (
    Listing,
    ObjectStore,
    ProgressFn,
    StoredObject,
    check_key,
    is_content_addressed,
)
from j2c_server.storage.errors import ObjectNotFound
from j2c_server.storage.sink import TEMP_SUFFIX, PartialFile, copy_file_atomic

# os.link failing with these means "not here" (another filesystem, no hard links there, not
# allowed, too many links): copy instead.
_CANNOT_LINK = {errno.EXDEV, errno.EPERM, errno.EMLINK, errno.EOPNOTSUPP}


class FileStore(ObjectStore):
    """An :class:`~j2c_server.storage.base.ObjectStore` over a local folder."""

    def __init__(self, root: Path, *, shared: bool = False) -> None:
        self.root = root
        # ``storage.shared``: jobs of other users or uids (a container's, a cluster's) read it,
        # so what is written is readable by them (0644 in 0755 folders), and blobs are copied
        # rather than hard-linked from the private layer cache (one inode, one mode).
        self.shared = shared
        self._checked = False

    async def _private_root(self) -> None:
        # Once per store object, before its first write: a root an older j2c made may be 0755,
        # and one that was private before the store was shared, 0700.
        if not self._checked:
            if self.shared:
                await asyncio.to_thread(_shared_dir, self.root)
            else:
                await asyncio.to_thread(private_dir, self.root)
            self._checked = True

    def _readable_by_jobs(self, target: Path) -> None:
        """In a shared store: the object and the folders above it, up to the root, readable."""
        if not self.shared:
            return
        target.chmod(0o644)
        folder = target.parent
        while folder != self.root and self.root in folder.parents:
            folder.chmod(0o755)
            folder = folder.parent

    @property
    def kind(self) -> str:
        return "file"

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*check_key(key).split("/"))

    def uri(self, key: str) -> str:
        return self._path(key).absolute().as_uri()

    async def size(self, key: str) -> int | None:
        path = self._path(key)
        try:
            st = await asyncio.to_thread(path.stat)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if self.shared and not st.st_mode & stat.S_IROTH:
            # Written while the store was private (0600, maybe the layer cache's own inode):
            # a job of another uid cannot read it, so for a shared store it is not there yet.
            # The send writes a readable copy over it (the cache's inode stays private).
            return None
        return st.st_size

    async def _store_file(
        self, key: str, path: Path, size: int, progress: ProgressFn | None
    ) -> None:
        target = self._path(key)
        await self._private_root()
        linkable = is_content_addressed(key) and not self.shared
        if linkable and await asyncio.to_thread(_link_atomic, path, target):
            if progress is not None:
                progress(size)
            return
        await copy_file_atomic(path, target, progress=progress, what=self.uri(key))
        await asyncio.to_thread(self._readable_by_jobs, target)

    async def put_bytes(self, key: str, data: bytes) -> None:
        await self._private_root()
        await asyncio.to_thread(self._write_bytes, self._path(key), data)
        await asyncio.to_thread(self._readable_by_jobs, self._path(key))

    @staticmethod
    def _write_bytes(target: Path, data: bytes) -> None:
        sink = PartialFile(target)
        try:
            sink.write(data)
            sink.commit()
        except BaseException:
            sink.discard()
            raise

    async def _fetch_file(
        self, key: str, dest: Path, sha256: str | None, progress: ProgressFn | None
    ) -> None:
        source = self._path(key)
        try:
            await copy_file_atomic(
                source, dest, sha256=sha256, progress=progress, what=self.uri(key)
            )
        except (FileNotFoundError, NotADirectoryError) as exc:
            if exc.filename != str(source):
                raise
            raise ObjectNotFound(f"reading {self.uri(key)}: no such object") from None

    async def get_bytes(self, key: str) -> bytes:
        source = self._path(key)
        try:
            return await asyncio.to_thread(source.read_bytes)
        except (FileNotFoundError, NotADirectoryError):
            raise ObjectNotFound(f"reading {self.uri(key)}: no such object") from None

    async def presign(self, key: str, *, expires_s: int | None = None) -> str | None:
        return None

    async def list(self, prefix: str = "") -> list[str]:
        return await asyncio.to_thread(_walk_keys, self.root, prefix)

    async def list_objects(self, prefix: str = "") -> Listing:
        def dated() -> Listing:
            found = []
            for key in _walk_keys(self.root, prefix):
                try:
                    st = self._path(key).stat()
                except FileNotFoundError:
                    continue  # removed since the walk
                found.append(StoredObject(key, st.st_size, st.st_mtime))
            return found

        return await asyncio.to_thread(dated)

    async def delete(self, key: str) -> None:
        await asyncio.to_thread(self._path(key).unlink, missing_ok=True)

    async def close(self) -> None:
        return None


def _shared_dir(folder: Path) -> None:
    """The root of a shared store: made, and opened to other uids if it was private."""
    folder.mkdir(parents=True, exist_ok=True)
    mode = stat.S_IMODE(folder.stat().st_mode)
    if mode & 0o055 != 0o055 and folder.stat().st_uid == os.geteuid():
        folder.chmod(mode | 0o755)


def private_objects(root: Path) -> int:
    """How many objects of a ``file://`` store other uids cannot read (written while it was
    private): what a shared store re-publishes as the sends reuse them."""
    count = 0
    for folder in ("blobs", "manifests"):
        for here, _dirs, files in os.walk(root / folder):
            for name in files:
                with contextlib.suppress(OSError):
                    if not os.stat(os.path.join(here, name)).st_mode & stat.S_IROTH:
                        count += 1
    return count


def _link_atomic(source: Path, target: Path) -> bool:
    """Hard-link ``source`` at ``target`` through a temp name renamed into place; False when this
    filesystem cannot link it there (the caller copies instead)."""
    private_dir(target.parent)
    # Named like a PartialFile, so that listings skip it while it exists.
    temp = target.with_name(f".{target.name}.{secrets.token_hex(8)}{TEMP_SUFFIX}")
    try:
        os.link(source, temp)
    except OSError as exc:
        if exc.errno in _CANNOT_LINK:
            return False
        raise
    try:
        # Same inode as the cache's blob (0600; an older j2c made some 0644): private as a copy.
        tighten_file(temp)
        fd = os.open(temp, os.O_RDONLY)
        try:
            os.fsync(fd)  # as durable as a copy: the packer does not sync its blobs
        finally:
            os.close(fd)
        os.replace(temp, target)
    finally:
        # Normally gone; but when ``target`` already was this very file (two writers linking
        # the same blob), rename() leaves both names in place.
        temp.unlink(missing_ok=True)
    return True


def _walk_keys(root: Path, prefix: str) -> list[str]:
    """Keys under ``root`` starting with ``prefix``, sorted; writes in progress are skipped."""
    # Walk only the folder the prefix points into, not the whole store.
    folder = prefix.rpartition("/")[0]
    start = root.joinpath(*check_key(folder).split("/")) if folder else root
    keys = []
    for here, _dirs, files in os.walk(start):
        base = Path(here).relative_to(root).as_posix()
        for name in files:
            if name.startswith(".") and name.endswith(TEMP_SUFFIX):
                continue  # a write in progress, or one abandoned by a crash
            key = name if base == "." else f"{base}/{name}"
            if key.startswith(prefix):
                keys.append(key)
    return sorted(keys)
