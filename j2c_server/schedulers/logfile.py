"""Follow a job's growing output file as lines with resumable byte cursors.

For backends whose jobs write their output to a file this machine can read (local, and any
scheduler with a shared job folder). A cursor is the byte offset just after a line, so a follower
that restarts from its last persisted cursor gets every later line exactly once.

Only ``\\n`` ends a line: ``\\r`` stays inside it, so progress bars keep their redraws. A last
line without a newline is held back until it ends, or delivered once the job is over. A line
longer than ``MAX_LINE_BYTES`` (a progress bar that never prints a newline) is delivered in
pieces, cut after a ``\\r`` where possible, so memory stays bounded.

The files are read off the event loop (a shared job folder may be a slow network filesystem),
by one :class:`_SharedReader` per event loop and interval: every file followed in this process
is read in the same worker-thread hop, once per interval, instead of one hop per file. With a
hundred running jobs that is 20 thread hops a second rather than 2,000 (each a thread wake-up
and a loop wake-up: the server's largest cost at that scale after the interpreter itself).
"""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from j2c_server.core.errors import InvalidInput
from j2c_server.schedulers.base import LogLine

POLL_INTERVAL_S = 0.05
MAX_LINE_BYTES = 64 * 1024
_READ_BYTES = 256 * 1024
QUIET_READS = 2  # empty reads in a row before the job's end is looked for


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
    """Reads what was appended since the last read; runs in a worker thread (one follower's
    reads never overlap: it waits for each before asking again)."""

    def __init__(self, path: Path, offset: int) -> None:
        self.path = path
        self.offset = offset
        self.fd: int | None = None
        self.closed = False
        self.quiet = 0  # reads in a row that found nothing new
        self._reading = threading.Lock()

    def read(self, job_ended: Callable[[], bool]) -> tuple[bool, bytes]:
        """(whether the job had ended before this read, the new bytes). The end is looked
        for only when the file stayed quiet for a whole interval (the previous read found
        nothing new either): a job printing every few rounds costs reads, not end checks."""
        data = self._read()
        if data:
            self.quiet = 0
            return False, data
        self.quiet += 1
        if self.quiet < QUIET_READS:
            return False, b""
        ended = job_ended()
        # Read again after looking: whatever was written before the end is in this read.
        return ended, self._read()

    def _read(self) -> bytes:
        with self._reading:
            if self.closed:
                return b""  # its follower is gone (cancelled while this read was queued)
            try:
                if self.fd is None:
                    try:
                        self.fd = os.open(self.path, os.O_RDONLY)
                    except FileNotFoundError:
                        return b""
                data = os.pread(self.fd, _READ_BYTES, self.offset)
                self.offset += len(data)
                return data
            finally:
                if self.closed:  # closed during this read: the close was left to it
                    self._close_fd()

    def close(self) -> None:
        """From the event loop: never waits for a read in the worker thread (a slow network
        filesystem would stall the loop); that read closes the file when it ends."""
        self.closed = True
        if self._reading.acquire(blocking=False):
            try:
                self._close_fd()
            finally:
                self._reading.release()

    def _close_fd(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


_Read = tuple[bool, bytes]


class _SharedReader:
    """Reads the tails of every follower of this loop in one worker-thread hop per round: a
    follower that asks ``at_once`` (its first read, or more is waiting) joins the next round
    at once; one that drained its file joins the round after the interval."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._now: dict[_Tail, tuple[Callable[[], bool], asyncio.Future[_Read]]] = {}
        self._later: dict[_Tail, tuple[Callable[[], bool], asyncio.Future[_Read]]] = {}
        self._round: asyncio.Handle | None = None
        self._tick: asyncio.TimerHandle | None = None
        self._reading: set[asyncio.Future[dict[_Tail, _Read | BaseException]]] = set()  # held

    def read(
        self, tail: _Tail, job_ended: Callable[[], bool], *, at_once: bool
    ) -> Awaitable[_Read]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_Read] = loop.create_future()
        (self._now if at_once else self._later)[tail] = (job_ended, future)
        if at_once and self._round is None:
            self._round = loop.call_soon(self._start_round)
        elif not at_once and self._tick is None:
            self._tick = loop.call_later(self.interval_s, self._start_tick)
        return future

    def _start_tick(self) -> None:
        self._tick = None
        self._now.update(self._later)
        self._later = {}
        if self._round is None:
            self._start_round()

    def _start_round(self) -> None:
        self._round = None
        batch, self._now = self._now, {}
        batch = {tail: item for tail, item in batch.items() if not item[1].done()}
        if batch:
            task = asyncio.ensure_future(asyncio.to_thread(_read_all, batch))
            self._reading.add(task)  # the loop keeps only a weak reference to a task
            task.add_done_callback(self._reading.discard)
            task.add_done_callback(lambda done: self._deliver(batch, done))

    def _deliver(
        self,
        batch: dict[_Tail, tuple[Callable[[], bool], asyncio.Future[_Read]]],
        done: asyncio.Future[dict[_Tail, _Read | BaseException]],
    ) -> None:
        """Each read to its follower; a read that found nothing (and no end) is not: that
        tail is read again in the round after the interval, its follower left asleep (what it
        would ask for itself, without a wake-up per quiet file per round)."""
        quiet = {}
        for tail, (job_ended, future) in batch.items():
            if future.done():
                continue  # its follower was cancelled meanwhile
            if done.cancelled():  # the loop is shutting down
                future.cancel()
                continue
            error = done.exception()
            result: _Read | BaseException = done.result()[tail] if error is None else error
            if isinstance(result, BaseException):
                future.set_exception(result)
            elif result == (False, b""):
                quiet[tail] = (job_ended, future)
            else:
                future.set_result(result)
        if quiet:
            self._later.update(quiet)
            if self._tick is None:
                self._tick = asyncio.get_running_loop().call_later(
                    self.interval_s, self._start_tick
                )


def _read_all(
    batch: dict[_Tail, tuple[Callable[[], bool], asyncio.Future[_Read]]],
) -> dict[_Tail, _Read | BaseException]:
    """In the worker thread: every tail's read; one file's error is that follower's alone."""
    results: dict[_Tail, _Read | BaseException] = {}
    for tail, (job_ended, _) in batch.items():
        try:
            results[tail] = tail.read(job_ended)
        except Exception as exc:  # handed to its follower, which raises it
            results[tail] = exc
    return results


_readers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[float, _SharedReader]] = (
    weakref.WeakKeyDictionary()
)


def _reader(interval_s: float) -> _SharedReader:
    by_interval = _readers.setdefault(asyncio.get_running_loop(), {})
    if interval_s not in by_interval:
        by_interval[interval_s] = _SharedReader(interval_s)
    return by_interval[interval_s]


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
    reader = _reader(interval_s)
    buffer = bytearray()
    drained = False
    try:
        while True:
            # Drained: the next round after the interval, so that lines printed meanwhile
            # come as one batch; else (the first read, more waiting) the next round at once.
            ended, data = await reader.read(tail, job_ended, at_once=not drained)
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
            drained = len(data) < _READ_BYTES
    finally:
        tail.close()
