"""The watch stage: follow a submitted job's status and log lines until it is over.

Each line is classified once, here, at ingest: a line with the job's tag (core/j2c_lines.py)
is j2c's (j2c-unpack's, the notebook runner's, the scheduler's wrapper's) and is stored without
the tag, with its level and phase; any other line is the job's own, with the stream the
engine said it came from. Front ends render from that, never from how a line starts.

Lines are read from the scheduler after the last persisted cursor and written to the registry in
batches (whatever arrived while the previous batch was being written), each batch in one
transaction together with the cursor just after its last line. A watcher that dies and one that
takes over therefore continue from the same place: no line lost, none doubled. Writes carry the
lease owner, so a watcher that lost its lease cannot write at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from j2c_server.core.backoff import Backoff, retry_async
from j2c_server.core.coalesce import next_tick_s
from j2c_server.core.errors import SchedulerUnavailable
from j2c_server.core.j2c_lines import parse_line
from j2c_server.jobs.journal import Journal, status_change
from j2c_server.registry.event_log import RecordChange
from j2c_server.registry.event_rows import EventDraft
from j2c_server.registry.jobs_table import JobState
from j2c_server.schedulers.base import LogLine, Scheduler, SchedulerState
from j2c_server.unpack.inventory import PHASE as INVENTORY_PHASE
from j2c_server.wire.api import EventKind, JobHandle, JobRecord, JobStatus, LineOrigin

MAX_BATCH = 1000
# Bounded, and shallow: a job printing faster than we persist waits in its own log (read from
# a cursor), not in memory: per watched job at most this many lines and one read.
QUEUE_LINES = 2_000
STATUS_INTERVAL_S = 1.0
_NOT_YET_RUNNING = (JobStatus.submitted, JobStatus.queued)
RETRY_MAX_S = 30.0
T = TypeVar("T")
Log = logging.Logger | logging.LoggerAdapter[logging.Logger]


class InventoryHook(Protocol):
    """What learns a target's inventory from a job's log (``image.check.InventoryLearner``):
    given the message of j2c-unpack's ``inventory`` line, it returns the short one to store."""

    async def __call__(self, text: str) -> str: ...


@dataclasses.dataclass(frozen=True, slots=True)
class _Line:
    """A classified line on its way to the registry, with the cursor just after it."""

    draft: EventDraft
    cursor: str


class Watcher:
    def __init__(
        self,
        journal: Journal,
        scheduler: Scheduler,
        handle: JobHandle,
        *,
        current: Callable[[], Awaitable[JobState]],  # the job's status and message, read often
        log: Log,
        tag: str,  # the job's line tag: its j2c lines carry it
        inventory: InventoryHook | None = None,  # takes j2c-unpack's `inventory` line
    ) -> None:
        self.tag = tag
        self.inventory = inventory
        self.journal = journal
        self.scheduler = scheduler
        self.handle = handle
        self.current = current
        self.log = log
        self._output_seen = False

    async def run(self) -> SchedulerState:
        """Follow the job to its end; return the scheduler's final state."""
        # "" after an attempt's end (jobs/drive/attempts.py): the next run's log starts afresh.
        cursor = await self.journal.registry.events.log_cursor(self.journal.job_id) or None
        lines = _Lines(QUEUE_LINES)
        reader = asyncio.create_task(self._read_logs(cursor, lines))
        poller = asyncio.create_task(self._poll_status())
        try:
            await self._write_logs(lines)
            await reader  # re-raises a reader failure
        finally:
            for task in (reader, poller):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        return await self._status()

    async def _read_logs(self, cursor: str | None, lines: _Lines) -> None:
        received = 0  # lines so far: a retry after new lines starts a fresh backoff

        async def follow() -> None:
            nonlocal cursor, received
            async for line in self.scheduler.follow_logs(self.handle, cursor):
                if lines.full():
                    await lines.room()
                draft = log_draft(line, self.tag)
                if self.inventory is not None and draft.get("phase") == INVENTORY_PHASE:
                    # Kept for the job's target; the log gets a short line instead of the JSON.
                    draft["text"] = await self.inventory(draft["text"])
                lines.add(_Line(draft, line.cursor))
                cursor = line.cursor
                received += 1

        try:
            what = f"logs of {self.handle.id}"
            await retry_async(follow, scheduler_backoff(what, self.log), progress=lambda: received)
        finally:
            lines.end()

    async def _write_logs(self, lines: _Lines) -> None:
        while True:
            batch = await lines.take(MAX_BATCH)
            if not batch:
                return  # ended, everything written
            drafts: list[EventDraft] = [line.draft for line in batch]
            change = None
            if not self._output_seen:
                self._output_seen = True
                drafts, change = await self._running_before(drafts)
            if change is None:
                await self.journal.write_events(drafts, log_cursor=batch[-1].cursor)
            else:
                await self.journal.write(drafts, change=change, log_cursor=batch[-1].cursor)

    async def _running_before(
        self, drafts: list[EventDraft]
    ) -> tuple[list[EventDraft], RecordChange | None]:
        """Output means the job runs: a job still recorded as submitted or queued gets its
        ``running`` status in the same write as its first lines, numbered before them (the
        status poll may see it up to a second later)."""
        if (await self.current()).status not in _NOT_YET_RUNNING:
            return drafts, None

        def apply(record: JobRecord) -> None:
            if record.status in _NOT_YET_RUNNING:  # never over a cancel asked meanwhile
                status_change(JobStatus.running, None)(record)

        status: EventDraft = {"kind": EventKind.status, "status": JobStatus.running}
        return [status, *drafts], apply

    async def _poll_status(self) -> None:
        """Turn the scheduler's non-terminal states (queued, running, ...) into status events;
        the terminal one is recorded by the results stage, after the last line."""
        while True:
            state = await self._status()
            recorded = await self.current()
            if (
                not state.status.terminal
                and state.status != JobStatus.submitted
                and recorded.status != JobStatus.cancelling
                and (state.status, state.message) != (recorded.status, recorded.message)
            ):
                await self.journal.status(state.status, state.message)
            # On the shared tick: every watcher's read of its job's state in one query.
            await asyncio.sleep(next_tick_s(STATUS_INTERVAL_S))

    async def _status(self) -> SchedulerState:
        what = f"status of {self.handle.id}"
        return await until_available(lambda: self.scheduler.status(self.handle), what, self.log)


class _Lines:
    """The reader's lines on their way to the writer: added one at a time, taken all at once
    (one wake-up of the writer per read of the log, not one queue step per line). Bounded:
    the reader waits for room while ``limit`` lines wait."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lines: list[_Line] = []
        self._ended = False
        self._ready = asyncio.Event()  # lines wait, or the reader ended
        self._room = asyncio.Event()
        self._room.set()

    def full(self) -> bool:
        return len(self._lines) >= self.limit

    async def room(self) -> None:
        self._room.clear()
        await self._room.wait()

    def add(self, line: _Line) -> None:
        self._lines.append(line)
        self._ready.set()

    def end(self) -> None:
        self._ended = True
        self._ready.set()

    async def take(self, most: int) -> list[_Line]:
        """Up to ``most`` lines, in order, once any wait; [] once the reader ended and every
        line was taken."""
        while not self._lines and not self._ended:
            self._ready.clear()
            await self._ready.wait()
        batch = self._lines[:most]
        del self._lines[:most]
        self._room.set()
        return batch


def scheduler_backoff(what: str, log: Log, *, attempts: int | None = None) -> Backoff:
    """Retrying while the scheduler is unavailable, each retry logged as a warning."""

    def on_retry(exc: BaseException, _attempt: int, delay: float) -> None:
        log.warning("j2c: %s: %s; retry in %.0fs", what, exc, delay)

    return Backoff(
        lambda exc: isinstance(exc, SchedulerUnavailable),
        on_retry,
        attempts=attempts,
        max_s=RETRY_MAX_S,
    )


async def until_available(
    call: Callable[[], Awaitable[T]], what: str, log: Log, *, attempts: int | None = None
) -> T:
    """``call()``, retried with backoff while the scheduler is unavailable (all ``attempts``
    used: the last error is raised)."""
    return await retry_async(call, scheduler_backoff(what, log, attempts=attempts))


def log_draft(line: LogLine, tag: str) -> EventDraft:
    """A log line's event: j2c's (tagged: its level and phase, the tag stripped) or the job's
    (the stream the engine said, if it says); a multi-node job's carries its rank in ``data``."""
    ours = parse_line(line.text, tag)
    draft: EventDraft
    if ours is None:
        draft = {"kind": EventKind.log, "stream": line.stream, "text": line.text}
    else:
        draft = {
            "kind": EventKind.log,
            "stream": line.stream,
            "origin": LineOrigin.j2c,
            "level": ours.level,
            "phase": ours.phase,
            "text": ours.text,
        }
    if line.rank is not None:
        draft["data"] = {"rank": line.rank}
    return draft
