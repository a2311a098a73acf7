"""The ObjectStore interface shared by the pipeline, `j2c build` and `j2c-unpack`.

Keys are '/'-separated and relative to the store's root (the folder of a ``file://`` URL, or the
bucket + prefix of an ``s3://`` URL). Layout written by j2c:

- ``blobs/sha256/<hex>.tar.zst``   content-addressed layers
- ``blobs/sha256/<hex>.file``      content-addressed big files of a code layer (raw bytes)
- ``manifests/sha256/<hex>.json``  content-addressed manifests
- ``jobs/<job id>/...``            per-job files (resolved manifests, outputs)
"""

from __future__ import annotations

import asyncio
import logging
import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from j2c_server.core.errors import InvalidInput

if TYPE_CHECKING:
    from j2c_server.storage.post_upload import PostPolicy

log = logging.getLogger("j2c.storage")

# Called with the number of bytes moved since the previous call.
ProgressFn = Callable[[int], None]

# Keys under these folders name their content: the same key always holds the same bytes.
CONTENT_ADDRESSED_PREFIXES = ("blobs/", "manifests/")


def blob_key(digest: str) -> str:
    algo, _, hexdigest = digest.partition(":")
    return f"blobs/{algo}/{hexdigest}.tar.zst"


def file_blob_key(digest: str) -> str:
    """A big file's blob: the file's own bytes, named by their sha256."""
    algo, _, hexdigest = digest.partition(":")
    return f"blobs/{algo}/{hexdigest}.file"


def manifest_key(digest: str) -> str:
    algo, _, hexdigest = digest.partition(":")
    return f"manifests/{algo}/{hexdigest}.json"


def is_content_addressed(key: str) -> bool:
    """True for keys whose name is their digest: an existing object never needs writing again."""
    return key.startswith(CONTENT_ADDRESSED_PREFIXES)


def is_plain_relative_path(path: str) -> bool:
    """Whether ``path`` is relative, '/'-separated, without backslashes or NULs, and has no
    empty, '.' or '..' segment: it can neither escape the folder it is joined to nor name
    another path's object under a second spelling. Store keys and artifact names are such."""
    parts = path.split("/")
    return (
        bool(path)
        and "\\" not in path
        and "\x00" not in path
        and not any(part in ("", ".", "..") for part in parts)
    )


def check_key(key: str) -> str:
    """Refuse keys that could escape the store's root or alias another key; return ``key``."""
    if not is_plain_relative_path(key):
        raise InvalidInput(
            f"storage key {key!r} is not valid",
            field="key",
            hint="keys are relative, '/'-separated, without empty, '.' or '..' segments",
        )
    return key


@dataclass(frozen=True)
class StoredObject:
    """One object of a listing with its size and when it was last written (Unix time)."""

    key: str
    size: int
    modified: float


Listing = list[StoredObject]


class ObjectStore(ABC):
    """An S3-like store. Every method is async; file I/O inside runs off the event loop.

    The public methods and their contracts live here; a backend implements the rest and the two
    hooks :meth:`_store_file` and :meth:`_fetch_file`.
    """

    @property
    @abstractmethod
    def kind(self) -> str:
        """'file' or 's3'."""

    @abstractmethod
    def uri(self, key: str) -> str:
        """The location of ``key`` as a URI a job can be given (file:///..., s3://...)."""

    async def exists(self, key: str) -> bool:
        return await self.size(key) is not None

    @abstractmethod
    async def size(self, key: str) -> int | None:
        """Bytes stored under ``key``, or None when absent."""

    async def put_file(
        self,
        key: str,
        path: Path,
        *,
        progress: ProgressFn | None = None,
        checked: bool = False,
    ) -> bool:
        """Store the file's bytes under ``key`` (atomic: readers see all or nothing).

        Returns False when nothing was written: ``key`` is content-addressed and already holds as
        many bytes (the one existence check every caller gets, so none does its own). With
        ``checked``, the caller has just asked the store (``size``) and found it lacking: no
        second round trip asks again.
        """
        size = await asyncio.to_thread(os.path.getsize, path)
        if not checked and is_content_addressed(key) and await self.size(key) == size:
            log.debug("%s is already stored", self.uri(key))
            return False
        await self._store_file(key, path, size, progress)
        return True

    @abstractmethod
    async def _store_file(
        self, key: str, path: Path, size: int, progress: ProgressFn | None
    ) -> None:
        """Write the ``size`` bytes of ``path`` under ``key``, atomically."""

    @abstractmethod
    async def put_bytes(self, key: str, data: bytes) -> None: ...

    async def get_file(
        self,
        key: str,
        dest: Path,
        *,
        sha256: str | None = None,
        progress: ProgressFn | None = None,
    ) -> None:
        """Write ``key`` to ``dest``; with ``sha256`` (hex) verify it, else raise IntegrityError.

        ``dest`` ends up whole or untouched; a missing key raises ObjectNotFound.
        """
        await self._fetch_file(key, dest, sha256, progress)

    @abstractmethod
    async def _fetch_file(
        self, key: str, dest: Path, sha256: str | None, progress: ProgressFn | None
    ) -> None: ...

    @abstractmethod
    async def get_bytes(self, key: str) -> bytes: ...

    @abstractmethod
    async def presign(self, key: str, *, expires_s: int | None = None) -> str | None:
        """A time-limited HTTPS GET URL needing no credentials, or None if the backend has none."""

    async def presign_post(
        self, prefix: str, *, max_bytes: int, expires_s: int
    ) -> PostPolicy | None:
        """A signed upload form (S3's POST policy) allowing keys under ``prefix`` only, files
        up to ``max_bytes``, for ``expires_s`` seconds; None if the backend has none."""
        return None

    @abstractmethod
    async def list(self, prefix: str = "") -> list[str]: ...

    async def list_objects(self, prefix: str = "") -> Listing:
        """Like :meth:`list`, with each object's size and age (what ``j2c gc`` needs)."""
        raise NotImplementedError(f"{type(self).__name__} cannot list objects with their dates")

    @abstractmethod
    async def delete(self, key: str) -> None: ...

    @abstractmethod
    async def close(self) -> None: ...
