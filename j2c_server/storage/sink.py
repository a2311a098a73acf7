"""Receiving a file atomically: a hidden temp file beside the destination, moved into place only
when it is complete and (when a digest is given) verified.

Readers of the destination see the old file or the whole new one, never a part; the file is
0600 and folders made for it 0700 (:mod:`j2c_server.core.file_modes`), whatever the umask; a
failed or
corrupt transfer leaves no partial file behind. Concurrent writers of one destination each use
their own temp file, and the last rename wins with complete content. The methods are blocking:
async callers run them in a worker thread.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import BinaryIO

from j2c_server.core.errors import IntegrityError, InvalidInput
from j2c_server.core.file_modes import private_dir
from j2c_server.storage.base import ProgressFn

TEMP_SUFFIX = ".j2c-part"
COPY_CHUNK = 4 * 1024 * 1024
FLUSH_BYTES = 8 * 1024 * 1024
_HEX_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def expected_sha256(sha256: str | None) -> str | None:
    """Normalise a hex digest (a leading 'sha256:' is accepted); refuse anything else."""
    if sha256 is None:
        return None
    value = sha256.lower().removeprefix("sha256:")
    if not _HEX_SHA256.match(value):
        raise InvalidInput(
            f"sha256 {sha256!r} is not a digest", field="sha256", hint="64 hex digits expected"
        )
    return value


class PartialFile:
    """One file being received; ``commit`` verifies and renames, ``discard`` removes it."""

    def __init__(self, dest: Path, *, sha256: str | None = None, what: str = "") -> None:
        self.dest = dest
        self.what = what or str(dest)
        self._expected = expected_sha256(sha256)
        private_dir(dest.parent)
        # mkstemp makes the file 0600, and it keeps that mode at its destination.
        fd, name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=TEMP_SUFFIX, dir=dest.parent)
        self.path = Path(name)
        self._file: BinaryIO = os.fdopen(fd, "wb")
        self._hash = hashlib.sha256() if self._expected else None
        self.size = 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._file.write(data)
        if self._hash is not None:
            self._hash.update(data)
        self.size += len(data)

    def restart(self) -> None:
        """Forget what was received (the source changed under us); start again from byte 0."""
        self._file.seek(0)
        self._file.truncate()
        self._hash = hashlib.sha256() if self._expected else None
        self.size = 0

    def commit(self) -> None:
        """Make the received bytes durable and visible at ``dest``, or raise IntegrityError."""
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        if self._hash is not None and self._hash.hexdigest() != self._expected:
            got = self._hash.hexdigest()
            self.discard()
            raise IntegrityError(
                f"{self.what}: content does not match its digest "
                f"(expected sha256:{self._expected}, got sha256:{got})",
                hint="the stored object is corrupt or was replaced; upload it again "
                "(a resubmit re-uploads missing or damaged layers)",
            )
        os.replace(self.path, self.dest)

    def discard(self) -> None:
        self._file.close()
        self.path.unlink(missing_ok=True)


def _copy_blocking(
    src: Path, dest: Path, sha256: str | None, what: str, report: Callable[[int], None] | None
) -> None:
    sink = PartialFile(dest, sha256=sha256, what=what)
    try:
        with src.open("rb") as source:
            while chunk := source.read(COPY_CHUNK):
                sink.write(chunk)
                if report is not None:
                    report(len(chunk))
        sink.commit()
    except BaseException:
        sink.discard()
        raise


async def copy_file_atomic(
    src: Path,
    dest: Path,
    *,
    sha256: str | None = None,
    progress: ProgressFn | None = None,
    what: str = "",
) -> None:
    """Copy ``src`` to ``dest`` atomically in a worker thread; progress arrives on the loop."""
    loop = asyncio.get_running_loop()
    report = None
    if progress is not None:
        callback = progress

        def report(moved: int) -> None:
            loop.call_soon_threadsafe(callback, moved)

    await asyncio.to_thread(_copy_blocking, src, dest, sha256, what, report)


async def receive_chunks(
    chunks: AsyncIterator[bytes], sink: PartialFile, progress: ProgressFn | None
) -> None:
    """Write a network stream into ``sink`` in big blocks, off the event loop.

    Whatever arrived before a failure is still written, so a retry resumes right after it.
    """
    pending: list[bytes] = []
    buffered = 0

    async def flush() -> None:
        nonlocal pending, buffered
        if not pending:
            return
        block, moved = b"".join(pending), buffered
        pending, buffered = [], 0
        await asyncio.to_thread(sink.write, block)
        if progress is not None:
            progress(moved)

    try:
        async for chunk in chunks:
            pending.append(chunk)
            buffered += len(chunk)
            if buffered >= FLUSH_BYTES:
                await flush()
    finally:
        await flush()
