"""A byte range of a local file as a seekable, read-only upload body that hashes what it sends.

The HTTP client reads the body in its executor, a chunk at a time, so a part goes from disk to
the socket without ever being held in memory whole, and its MD5 is computed on that same read
(off the event loop, one pass over the data, one copy: a ``pread`` into the bytes handed to the
client). The MD5 is then compared with the ETag the server returns (see :func:`check_etag`),
unless hashing was stopped because the server verifies a checksum itself.
:func:`range_digests` computes a part's CRC32 (sent ahead as a checksum header) and, for
resuming, its MD5. Each attempt opens its own range, so a retry never shares a file position
with a read left over from a failed attempt.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

HASH_BLOCK = 1024 * 1024
# With these server-side encryptions S3's ETag is not the MD5 of the data (AWS S3 docs, "ETag").
_OPAQUE_ETAG_ENCRYPTION = ("aws:kms", "aws:kms:dsse")


class CorruptTransfer(Exception):
    """The server stored other bytes than were sent (its ETag is not their MD5)."""


class FileRange(io.RawIOBase):
    """Bytes ``[offset, offset + size)`` of ``path``; positions are relative to ``offset``."""

    def __init__(self, path: Path, offset: int, size: int, *, md5: bool = True) -> None:
        super().__init__()
        self._file = path.open("rb", buffering=0)
        self._offset = offset
        self._size = size
        self._pos = 0
        self._md5 = hashlib.md5(usedforsecurity=False) if md5 else None
        self._hashed = 0  # bytes [0, _hashed) went through _md5, in order

    def __len__(self) -> int:
        return self._size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, pos: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = min(max(base + pos, 0), self._size)
        return self._pos

    def read(self, size: int | None = -1) -> bytes:
        """The next ``size`` bytes, in one ``pread`` into a new bytes object: the HTTP client
        reads the body this way (a copy less than ``RawIOBase.read``, which fills a bytearray
        and copies it into bytes)."""
        left = self._size - self._pos
        wanted = left if size is None or size < 0 else min(size, left)
        if wanted <= 0:
            return b""
        data = os.pread(self._file.fileno(), wanted, self._offset + self._pos)
        self._advance(data, len(data), wanted)
        return data

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        wanted = min(len(buffer), self._size - self._pos)
        if wanted <= 0:
            return 0
        view = memoryview(buffer)[:wanted]
        got = os.preadv(self._file.fileno(), [view], self._offset + self._pos)
        self._advance(view, got, wanted)
        return got

    def _advance(self, data: bytes | memoryview, got: int, wanted: int) -> None:
        """Hash the ``got`` bytes just read at the current position (once, in order)."""
        if got < wanted:
            raise OSError(f"{self._file.name} shrank while it was being uploaded")
        md5 = self._md5
        if md5 is not None and self._pos <= self._hashed < self._pos + got:
            md5.update(data[self._hashed - self._pos : got])
            self._hashed = self._pos + got
        self._pos += got

    def stop_md5(self) -> None:
        """Hash no more: the server verifies what it receives (see :mod:`.multipart`)."""
        self._md5 = None

    def md5(self) -> bytes | None:
        """MD5 of the whole range once it has all been read, else None."""
        if self._md5 is None or self._hashed != self._size:
            return None
        return self._md5.digest()

    def close(self) -> None:
        self._file.close()
        super().close()


def range_digests(
    path: Path, offset: int, size: int, *, md5: bool, crc32: bool = True
) -> tuple[bytes | None, str]:
    """(MD5 digest if asked, base64 CRC32 if asked, else "") of a byte range of ``path``, in one
    read through one reused buffer.

    Blocking: run it in a worker thread.
    """
    crc = 0
    digest = hashlib.md5(usedforsecurity=False) if md5 else None
    buffer = memoryview(bytearray(HASH_BLOCK))
    with FileRange(path, offset, size, md5=False) as source:
        while got := source.readinto(buffer):
            block = buffer[:got]
            if crc32:
                crc = zlib.crc32(block, crc)
            if digest is not None:
                digest.update(block)
    return (
        digest.digest() if digest is not None else None,
        base64.b64encode(crc.to_bytes(4, "big")).decode("ascii") if crc32 else "",
    )


def check_etag(response: Mapping[str, Any], digest: bytes | None, what: str) -> str:
    """The response's ETag, after checking it is ``digest``, the MD5 of what was sent."""
    etag = str(response["ETag"])
    opaque = response.get("ServerSideEncryption") in _OPAQUE_ETAG_ENCRYPTION or response.get(
        "SSECustomerAlgorithm"
    )
    if not opaque and digest is not None and etag.strip('"').lower() != digest.hex():
        raise CorruptTransfer(f"{what}: the server's ETag {etag} is not the MD5 of the bytes sent")
    return etag
