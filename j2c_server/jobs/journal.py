"""One job's writer: every event and record change goes through here, persisted then published.

The registry assigns each event its ``seq`` inside the transaction that stores it; only after
that commit are in-process subscribers woken, so a subscriber never sees an event that a crash
could still lose. Progress from worker threads is sampled into at most a few events per second.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from j2c_server.jobs.fanout import EventBus
from j2c_server.pack import PackProgress
from j2c_server.registry.event_log import RecordChange
from j2c_server.registry.event_rows import EventDraft
from j2c_server.registry.job_registry import Registry
from j2c_server.wire.api import EventKind, JobRecord, JobStatus, Stage
from j2c_server.wire.manifest import LayerRole

PROGRESS_INTERVAL_S = 0.2  # at most 5 progress events per second per stage


class CancelPending(Exception):
    """A job being cancelled keeps that status until it ends (raised to abort the write)."""


def status_change(status: JobStatus, message: str | None) -> RecordChange:
    """The record change that goes with a status event (timestamps included)."""

    def apply(record: JobRecord) -> None:
        if record.status == JobStatus.cancelling and not status.terminal:
            raise CancelPending
        now = time.time()
        record.status = status
        record.message = message
        if status == JobStatus.running and record.started_at is None:
            record.started_at = now
        if status.terminal:
            record.finished_at = now
        # The attempt that runs now (jobs/drive/attempts.py) gets the same moments.
        attempt = record.attempts[-1] if record.attempts else None
        if attempt is not None and attempt.number == record.attempt:
            if status == JobStatus.running and attempt.started_at is None:
                attempt.started_at = now
            if status.terminal and attempt.ended_at is None:
                attempt.ended_at, attempt.status = now, status

    return apply


def combine(*changes: RecordChange | None) -> RecordChange:
    def apply(record: JobRecord) -> None:
        for change in changes:
            if change is not None:
                change(record)

    return apply


class Journal:
    def __init__(
        self, registry: Registry, bus: EventBus, job_id: str, *, owner: str | None = None
    ) -> None:
        self.registry = registry
        self.bus = bus
        self.job_id = job_id
        self.owner = owner

    async def write(
        self,
        drafts: Sequence[EventDraft],
        *,
        change: RecordChange | None = None,
        log_cursor: str | None = None,
    ) -> JobRecord:
        with self.bus.writing(self.job_id):
            record, events = await self.registry.events.append(
                self.job_id, drafts, change=change, log_cursor=log_cursor, owner=self.owner
            )
            if events:
                self.bus.publish(self.job_id, events)
        return record

    async def write_events(self, drafts: Sequence[EventDraft], *, log_cursor: str) -> None:
        """Events without a record change (a job's log lines): the registry's fast path."""
        with self.bus.writing(self.job_id):
            events = await self.registry.events.append_many(
                self.job_id, drafts, log_cursor=log_cursor, owner=self.owner
            )
            if events:
                self.bus.publish(self.job_id, events)

    async def status(
        self,
        status: JobStatus,
        message: str | None = None,
        *,
        change: RecordChange | None = None,
        data: dict[str, Any] | None = None,
    ) -> JobRecord:
        """Record a status change with its event; while the job is being cancelled only its
        end is recorded (the current record is returned instead)."""
        draft: EventDraft = {"kind": EventKind.status, "status": status, "text": message}
        if data:
            draft["data"] = data
        try:
            return await self.write([draft], change=combine(status_change(status, message), change))
        except CancelPending:
            return await self.registry.jobs.get(self.job_id)

    async def stage(
        self,
        stage: Stage,
        state: str,
        text: str,
        *,
        data: dict[str, Any] | None = None,
        change: RecordChange | None = None,
    ) -> JobRecord:
        draft: EventDraft = {"kind": EventKind.stage, "stage": stage, "state": state, "text": text}
        if data:
            draft["data"] = data
        return await self.write([draft], change=change)

    async def error(self, text: str, data: dict[str, Any] | None = None) -> JobRecord:
        return await self.write([{"kind": EventKind.error, "text": text, "data": data or {}}])

    @asynccontextmanager
    async def progress(
        self, stage: Stage, *, total_bytes: int | None = None, total_files: int | None = None
    ) -> AsyncIterator[ProgressMeter]:
        """A meter that worker threads add to; its readings become throttled progress events,
        and a last one when the block ends."""
        meter = ProgressMeter(total_bytes=total_bytes, total_files=total_files)
        sampler = asyncio.create_task(self._sample(stage, meter))
        try:
            yield meter
        finally:
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler
        await self._emit_progress(stage, meter, final=True)

    async def _sample(self, stage: Stage, meter: ProgressMeter) -> None:
        while True:
            await asyncio.sleep(PROGRESS_INTERVAL_S)
            await self._emit_progress(stage, meter, final=False)

    async def _emit_progress(self, stage: Stage, meter: ProgressMeter, *, final: bool) -> None:
        reading = meter.read(final=final)
        if reading is not None:
            await self.write([{"kind": EventKind.progress, "stage": stage, "data": reading}])


class ProgressMeter:
    """Counters a worker thread adds to; the event loop reads them at its own pace."""

    def __init__(self, *, total_bytes: int | None, total_files: int | None) -> None:
        self.total_bytes = total_bytes
        self.total_files = total_files
        self._bytes = 0
        self._files = 0
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._last_read: tuple[int, int] | None = None

    def add(self, nbytes: int = 0, files: int = 0) -> None:
        with self._lock:
            self._bytes += nbytes
            self._files += files

    def bytes_callback(self) -> Callable[[int], None]:
        """A storage-style ``ProgressFn``: called with bytes moved since the last call."""
        return lambda nbytes: self.add(nbytes)

    def pack_callback(self) -> Callable[[PackProgress], None]:
        """The packer's progress callback: its per-layer cumulative counts become increments."""
        seen: dict[LayerRole, tuple[int, int]] = {}

        def report(progress: PackProgress) -> None:
            before = seen.get(progress.role, (0, 0))
            seen[progress.role] = (progress.bytes_done, progress.files_done)
            self.add(progress.bytes_done - before[0], progress.files_done - before[1])

        return report

    def read(self, *, final: bool) -> dict[str, Any] | None:
        """The counters as event data, or None when nothing moved since the last reading."""
        with self._lock:
            done = (self._bytes, self._files)
        if done == self._last_read or (final and done == (0, 0) and self._last_read is None):
            return None
        self._last_read = done
        elapsed = max(time.monotonic() - self._started, 1e-6)
        data: dict[str, Any] = {"bytes": done[0], "rate": round(done[0] / elapsed)}
        if done[1] or self.total_files:
            data["files"] = done[1]
        if self.total_bytes:
            data["total_bytes"] = self.total_bytes
            data["percent"] = round(min(100.0, 100.0 * done[0] / self.total_bytes), 1)
        if self.total_files:
            data["total_files"] = self.total_files
        return data
