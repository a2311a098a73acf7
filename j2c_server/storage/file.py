"""The embedded ``file://`` object store: a local folder (by default in the Jupyter data dir).

Keys map to paths under the root and cannot leave it. Writes go to a temp file beside the target
and are renamed into place, so readers and concurrent writers of one key never see a partial
object. All file I/O runs in worker threads, never on the event loop.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from .base import ProgressFn, check_key, is_content_addressed
from .errors import ObjectNotFound
from .sink import TEMP_SUFFIX, PartialFile, copy_file_atomic


class FileStore:
    """An :class:`~j2c_server.storage.base.ObjectStore` over a local folder."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @property
    def kind(self) -> str:
        return "file"

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*check_key(key).split("/"))

    def uri(self, key: str) -> str:
        return self._path(key).absolute().as_uri()

    async def exists(self, key: str) -> bool:
        return await self.size(key) is not None

    async def size(self, key: str) -> int | None:
        path = self._path(key)
        try:
            stat = await asyncio.to_thread(path.stat)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return stat.st_size

    async def put_file(self, key: str, path: Path, *, progress: ProgressFn | None = None) -> None:
        target = self._path(key)
        if is_content_addressed(key):
            local = await asyncio.to_thread(os.path.getsize, path)
            if await self.size(key) == local:
                return
        await copy_file_atomic(path, target, progress=progress, what=self.uri(key))

    async def put_bytes(self, key: str, data: bytes) -> None:
        await asyncio.to_thread(self._write_bytes, self._path(key), data)

    @staticmethod
    def _write_bytes(target: Path, data: bytes) -> None:
        sink = PartialFile(target)
        try:
            sink.write(data)
            sink.commit()
        except BaseException:
            sink.discard()
            raise

    async def get_file(
        self,
        key: str,
        dest: Path,
        *,
        sha256: str | None = None,
        progress: ProgressFn | None = None,
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

    async def delete(self, key: str) -> None:
        await asyncio.to_thread(self._path(key).unlink, missing_ok=True)

    async def close(self) -> None:
        return None


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
