"""Follow a job's growing output file as lines with resumable byte cursors.

For backends whose jobs write their output to a file this machine can read (local, and any
scheduler with a shared job folder). A cursor is the byte offset just after a line, so a follower
that restarts from its last persisted cursor gets every later line exactly once.

Only ``\\n`` ends a line: ``\\r`` stays inside it, so progress bars keep their redraws. A last
line without a newline is held back until it ends, or delivered once the job is over. A line
longer than ``MAX_LINE_BYTES`` (a progress bar that never prints a newline) is delivered in
pieces, cut after a ``\\r`` where possible, so memory stays bounded.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from ..errors import InvalidInput
from .base import LogLine

POLL_INTERVAL_S = 0.05
MAX_LINE_BYTES = 64 * 1024
_READ_BYTES = 256 * 1024


def parse_cursor(cursor: str | None) -> int:
    if cursor is None or cursor == "":
        return 0
    if not cursor.isdigit():
        raise InvalidInput(f"log cursor {cursor!r} is not a byte offset", field="cursor")
    return int(cursor)


def _cut_point(data: bytearray, start: int) -> int:
    """Where to end an over-long line: after its last ``\\r`` within the limit, else at the
    limit moved back to a UTF-8 character boundary."""
    limit = start + MAX_LINE_BYTES
    carriage_return = data.rfind(b"\r", start + 1, limit)
    if carriage_return >= 0:
        return carriage_return + 1
    while limit > start + 1 and data[limit] & 0xC0 == 0x80:
        limit -= 1
    return limit


class _Tail:
    """Reads what was appended since the last read; runs in a worker thread."""

    def __init__(self, path: Path, offset: int) -> None:
        self.path = path
        self.offset = offset
        self.fd: int | None = None

    def read(self, job_ended: Callable[[], bool]) -> tuple[bool, bytes]:
        """(whether the job had ended before this read, the new bytes). The end is looked
        for only when there is nothing new to read: a job printing fast costs one read."""
        data = self._read()
        if data:
            return False, data
        ended = job_ended()
        # Read again after looking: whatever was written before the end is in this read.
        return ended, self._read()

    def _read(self) -> bytes:
        if self.fd is None:
            try:
                self.fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                return b""
        data = os.pread(self.fd, _READ_BYTES, self.offset)
        self.offset += len(data)
        return data

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


async def follow_log_file(
    path: Path,
    cursor: str | None,
    job_ended: Callable[[], bool],
    *,
    interval_s: float = POLL_INTERVAL_S,
) -> AsyncIterator[LogLine]:
    """Yield the file's lines after ``cursor`` as they are written; end once ``job_ended()``
    (a blocking check, run off the event loop) is true and everything written is delivered."""
    line_start = parse_cursor(cursor)
    tail = _Tail(path, line_start)
    buffer = bytearray()
    try:
        while True:
            ended, data = await asyncio.to_thread(tail.read, job_ended)
            buffer += data
            consumed = 0
            while True:
                newline = buffer.find(b"\n", consumed, consumed + MAX_LINE_BYTES + 1)
                if newline >= 0:
                    end, next_start = newline, newline + 1
                elif len(buffer) - consumed > MAX_LINE_BYTES:
                    end = next_start = _cut_point(buffer, consumed)
                else:
                    break
                text = buffer[consumed:end].decode("utf-8", errors="replace")
                consumed = next_start
                yield LogLine(text=text, cursor=str(line_start + consumed))
            del buffer[:consumed]
            line_start += consumed
            if ended and len(data) < _READ_BYTES:
                if buffer:
                    text = buffer.decode("utf-8", errors="replace")
                    yield LogLine(text=text, cursor=str(line_start + len(buffer)))
                return
            if len(data) < _READ_BYTES:
                # Drained: wait for more, so that lines printed meanwhile come as one batch.
                await asyncio.sleep(interval_s)
    finally:
        tail.close()
