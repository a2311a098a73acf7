"""A byte range of a local file as a seekable, read-only upload body that hashes what it sends.

The HTTP client reads the body in its executor, a chunk at a time, so a part goes from disk to
the socket without ever being held in memory whole, and its MD5 is computed on that same read
(off the event loop, one pass over the data). The MD5 is then compared with the ETag the server
returns (see :func:`check_etag`). :func:`range_digests` computes a part's CRC32 (sent ahead as
a checksum header, which the server verifies) and, for resuming, its MD5. Each attempt opens its
own range, so a retry never shares a file position with a read left over from a failed attempt.
"""

from __future__ import annotations

import base64
import hashlib
import io
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

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        wanted = min(len(buffer), self._size - self._pos)
        if wanted <= 0:
            return 0
        self._file.seek(self._offset + self._pos)
        view = memoryview(buffer)[:wanted]
        got = self._file.readinto(view) or 0
        if got < wanted:
            raise OSError(f"{self._file.name} shrank while it was being uploaded")
        if self._md5 is not None and self._pos <= self._hashed < self._pos + got:
            self._md5.update(view[self._hashed - self._pos : got])
            self._hashed = self._pos + got
        self._pos += got
        return got

    def md5(self) -> bytes | None:
        """MD5 of the whole range once it has all been read, else None."""
        if self._md5 is None or self._hashed != self._size:
            return None
        return self._md5.digest()

    def close(self) -> None:
        self._file.close()
        super().close()


def range_digests(path: Path, offset: int, size: int, *, md5: bool) -> tuple[bytes | None, str]:
    """(MD5 digest if asked, base64 CRC32) of a byte range of ``path``, in one read.

    Blocking: run it in a worker thread.
    """
    crc = 0
    with FileRange(path, offset, size, md5=md5) as body:
        while block := body.read(HASH_BLOCK):
            crc = zlib.crc32(block, crc)
        digest = body.md5()
    return digest, base64.b64encode(crc.to_bytes(4, "big")).decode("ascii")


def check_etag(response: Mapping[str, Any], body: FileRange, what: str) -> str:
    """The response's ETag, after checking it is the MD5 of what ``body`` sent."""
    etag = str(response["ETag"])
    opaque = response.get("ServerSideEncryption") in _OPAQUE_ETAG_ENCRYPTION or response.get(
        "SSECustomerAlgorithm"
    )
    digest = body.md5()
    if not opaque and digest is not None and etag.strip('"').lower() != digest.hex():
        raise CorruptTransfer(f"{what}: the server's ETag {etag} is not the MD5 of the bytes sent")
    return etag
