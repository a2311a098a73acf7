"""The job registry: jobs, each job's ordered event log and watcher leases, in one SQLite file.

One file (``<data dir>/registry.sqlite3``, 0600 in a 0700 folder:
see :mod:`j2c_server.core.file_modes`)
is shared by every process that touches jobs on this machine: the Jupyter server, kernels running
the magic, the CLI and detached watchers. WAL mode lets readers work while one writer writes;
every write is one short ``BEGIN IMMEDIATE`` transaction and ``busy_timeout`` makes a second
writer wait for it instead of failing. An event's ``seq`` is assigned inside the transaction that
inserts it, so numbers never collide between processes. sqlite calls block, so the async API runs
them on a small thread pool, one connection per thread: the server's event loop never waits on
the disk.

The file, its connections, write transactions and the versioned schema are
:mod:`j2c_server.registry.db`'s; this module holds every statement that reads or writes the jobs,
events and leases tables (except the group commit's three batched statements, which are
:mod:`j2c_server.registry.batch`'s).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from j2c_server.core.errors import Conflict, J2CError, NotFound
from j2c_server.core.file_modes import private_dir, private_file, tighten_file
from j2c_server.registry import accounting
from j2c_server.registry import archive as event_archive
from j2c_server.registry import paging as registry_paging
from j2c_server.registry.batch import Append, GroupCommit, JobRow, Outcome, write_batch
from j2c_server.registry.db import REGISTRY_FILE, connect, migrate, write
from j2c_server.wire.api import TERMINAL_STATUSES, Event, JobRecord, JobStatus
from j2c_server.wire.event_frames import WireEvent, log_line_json, wire_json

T = TypeVar("T")

# The fields of an event that its writer chooses; the registry adds job_id, seq and time.
EventDraft = dict[str, Any]
RecordChange = Callable[[JobRecord], None]

_TERMINAL = tuple(sorted(s.value for s in TERMINAL_STATUSES))
# Jobs an identical request attaches to: still going, or done successfully.
_ATTACHABLE = tuple(
    sorted(s.value for s in JobStatus if s not in TERMINAL_STATUSES or s == JobStatus.succeeded)
)


class JobState(NamedTuple):
    """A job's status and message: the two fields of its record read without parsing it."""

    status: JobStatus
    message: str | None


class LeaseLost(J2CError):
    """Another process owns this job's lease now; the writer must stop watching it."""

    status_code = 409
    code = "lease_lost"


# What an append is checked against (last seq, status, lease owner), and the record it changes.
_APPEND_READ = (
    "SELECT j.last_seq, j.status, l.owner, j.record FROM jobs j "
    "LEFT JOIN leases l ON l.job_id = j.id WHERE j.id = ?"
)


def _check_append(job_id: str, job: JobRow | None, owner: str | None) -> int:
    """Refuse an append to a job that is gone, finished, or (with ``owner``) watched by
    another process; else the job's last seq."""
    if job is None:
        raise NotFound(f"no job {job_id!r}", field="job_id")
    last_seq, status, lease_owner = job
    if owner is not None and lease_owner != owner:
        raise LeaseLost(f"job {job_id} is watched by another process now")
    if JobStatus(status).terminal:
        # The terminal status event is the last event of a job, whoever writes next.
        raise Conflict(f"job {job_id} is already {status}", field="job_id")
    return int(last_seq)


def _record(row: tuple[str, int]) -> JobRecord:
    record = JobRecord.model_validate_json(row[0])
    record.last_seq = row[1]
    return record


class Registry:
    """Async access to the registry file; every method is one short transaction in a thread."""

    def __init__(self, path: Path, *, threads: int = 2) -> None:
        self.path = path
        # The registry holds requests and every log line: the user's alone (0700 folder, 0600
        # files). sqlite gives its -wal and -shm files the database file's mode, so creating
        # that one 0600 first is enough; files from an older j2c are tightened here.
        private_dir(path.parent)
        private_file(path)
        for suffix in ("-wal", "-shm", "-journal"):
            tighten_file(f"{path}{suffix}")
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="j2c-registry")
        self._group_commit = GroupCommit(lambda appends: self._call(self._append_batch, appends))
        migrate(self._conn())

    # ------------------------------------------------------------------ plumbing

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self.path)
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, partial(fn, *args))

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()

    # ------------------------------------------------------------------ jobs

    async def create_or_attach(
        self, record: JobRecord, first: EventDraft
    ) -> tuple[JobRecord, bool]:
        """Insert ``record`` with its first event, or return the job an identical request
        (same key) is attached to: one still going or one that succeeded, unless the request
        asks for a new run. Returns the record and whether it was created."""
        return await self._call(self._create_or_attach, record, first)

    def _create_or_attach(self, record: JobRecord, first: EventDraft) -> tuple[JobRecord, bool]:
        conn = self._conn()
        with write(conn):
            if not record.request.new:
                marks = ",".join("?" * len(_ATTACHABLE))
                row = conn.execute(
                    f"SELECT record, last_seq FROM jobs WHERE key = ? AND status IN ({marks}) "  # noqa: S608
                    "ORDER BY created_at DESC LIMIT 1",
                    (record.key, *_ATTACHABLE),
                ).fetchone()
                if row is not None:
                    return _record(row), False
            conn.execute(
                "INSERT INTO jobs (id, key, status, record, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (
                    record.id,
                    record.key,
                    record.status.value,
                    record.model_dump_json(),
                    record.created_at,
                    record.updated_at,
                ),
            )
            self._insert_events(conn, record.id, 0, [first])
            conn.execute("UPDATE jobs SET last_seq = 1 WHERE id = ?", (record.id,))
            record.last_seq = 1
        return record, True

    async def get(self, job_id: str) -> JobRecord:
        return await self._call(self._get, job_id)

    async def state(self, job_id: str) -> JobState:
        """The job's status and message, without parsing its record: what the job's driver
        looks at every second (a record parse per job per second adds up at a hundred jobs)."""
        return await self._call(self._state, job_id)

    def _state(self, job_id: str) -> JobState:
        row = (
            self._conn()
            .execute(
                "SELECT status, json_extract(record, '$.message') FROM jobs WHERE id = ?",
                (job_id,),
            )
            .fetchone()
        )
        if row is None:
            raise NotFound(f"no job {job_id!r}", field="job_id")
        return JobState(JobStatus(row[0]), row[1])

    def _get(self, job_id: str) -> JobRecord:
        row = (
            self._conn()
            .execute("SELECT record, last_seq FROM jobs WHERE id = ?", (job_id,))
            .fetchone()
        )
        if row is None:
            raise NotFound(f"no job {job_id!r}", field="job_id")
        return _record(row)

    async def all_jobs(self) -> list[JobRecord]:
        """Every job, newest first."""
        return await self._call(self._all_jobs)

    def _all_jobs(self) -> list[JobRecord]:
        rows = (
            self._conn()
            .execute("SELECT record, last_seq FROM jobs ORDER BY created_at DESC")
            .fetchall()
        )
        return [_record(row) for row in rows]

    async def jobs_page(
        self, limit: int, before: registry_paging.Cursor | None = None
    ) -> registry_paging.Page:
        """At most ``limit`` jobs, newest first, older than ``before`` (registry_paging)."""
        return await self._call(lambda: registry_paging.read_page(self._conn(), limit, before))

    async def previous(self, record: JobRecord) -> JobRecord | None:
        """The latest job for the same project created before ``record``: what a run is
        compared with to explain what it reuses and what it re-runs."""
        return await self._call(self._previous, record)

    def _previous(self, record: JobRecord) -> JobRecord | None:
        row = (
            self._conn()
            .execute(
                "SELECT record, last_seq FROM jobs WHERE id != ? AND created_at <= ? "
                "AND json_extract(record, '$.request.code_path') = ? "
                "ORDER BY created_at DESC LIMIT 1",
                (record.id, record.created_at, record.request.code_path),
            )
            .fetchone()
        )
        return None if row is None else _record(row)

    async def latest_like(self, record: JobRecord) -> JobRecord | None:
        """What a send is compared with: the latest job with the same settings
        (``request_key``), else the latest job of the same project."""
        return await self._call(self._latest_like, record)

    def _latest_like(self, record: JobRecord) -> JobRecord | None:
        row = (
            self._conn()
            .execute(
                "SELECT record, last_seq FROM jobs "
                "WHERE json_extract(record, '$.request.code_path') = ? "
                "ORDER BY json_extract(record, '$.request_key') = ? DESC, created_at DESC "
                "LIMIT 1",
                (record.request.code_path, record.request_key),
            )
            .fetchone()
        )
        return None if row is None else _record(row)

    async def remove(self, job_id: str) -> None:
        """Delete a finished job, its events and its lease; a job still going is a Conflict."""
        await self._call(self._remove, job_id)

    def _remove(self, job_id: str) -> None:
        conn = self._conn()
        with write(conn):
            row = conn.execute("SELECT status FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                raise NotFound(f"no job {job_id!r}", field="job_id")
            if row[0] not in _TERMINAL:
                raise Conflict(
                    f"job {job_id} is {row[0]}; cancel it or wait for it to finish before "
                    "removing it",
                    field="job_id",
                )
            for table, column in (("events", "job_id"), ("leases", "job_id"), ("jobs", "id")):
                conn.execute(f"DELETE FROM {table} WHERE {column} = ?", (job_id,))  # noqa: S608
        event_archive.remove_archive(self.path.parent, job_id)

    async def unaccounted_ended_jobs(self, ended_before: float) -> list[str]:
        """Ended jobs without their usage record (:mod:`.accounting`), oldest first."""
        return await self._call(
            lambda: accounting.unaccounted(self._conn(), ended_before, _TERMINAL)
        )

    async def mark_accounted(self, job_id: str) -> None:
        await self._call(lambda: accounting.mark_accounted(self._conn(), job_id))

    async def unowned_active_jobs(self) -> list[str]:
        """Jobs still going whose watcher lease is free or expired: nobody is driving them."""
        return await self._call(self._unowned_active_jobs)

    def _unowned_active_jobs(self) -> list[str]:
        marks = ",".join("?" * len(_TERMINAL))
        rows = (
            self._conn()
            .execute(
                f"SELECT id FROM jobs WHERE status NOT IN ({marks}) AND NOT EXISTS "  # noqa: S608
                "(SELECT 1 FROM leases WHERE leases.job_id = jobs.id AND leases.expires > ?) "
                "ORDER BY created_at",
                (*_TERMINAL, time.time()),
            )
            .fetchall()
        )
        return [row[0] for row in rows]

    # ------------------------------------------------------------------ events

    async def append(
        self,
        job_id: str,
        drafts: Sequence[EventDraft],
        *,
        change: RecordChange | None = None,
        log_cursor: str | None = None,
        owner: str | None = None,
    ) -> tuple[JobRecord, list[WireEvent]]:
        """Persist events (numbered next in this job's sequence), an optional record change and
        an optional scheduler log cursor, all in one transaction. With ``owner``, refuse
        (:class:`LeaseLost`) unless that owner still holds the job's lease: a watcher that lost
        its lease can never write a line its successor also writes."""
        return await self._call(self._append, job_id, drafts, change, log_cursor, owner)

    async def append_events(
        self,
        job_id: str,
        drafts: Sequence[EventDraft],
        *,
        log_cursor: str | None = None,
        owner: str | None = None,
    ) -> list[WireEvent]:
        """:meth:`append` without a record change and without reading the record back: the
        path of a job's log lines, taken many times a second per running job. Appends of
        several jobs waiting together share one transaction (:mod:`.registry_batch`)."""
        return await self._group_commit.append(Append(job_id, drafts, log_cursor, owner))

    def _append_batch(self, appends: list[Append]) -> list[Outcome]:
        def check(append: Append, job: JobRow | None) -> int:
            return _check_append(append.job_id, job, append.owner)

        conn = self._conn()
        with write(conn):
            return write_batch(conn, appends, check, self._make_events)

    def _append(
        self,
        job_id: str,
        drafts: Sequence[EventDraft],
        change: RecordChange | None,
        log_cursor: str | None,
        owner: str | None,
    ) -> tuple[JobRecord, list[WireEvent]]:
        conn = self._conn()
        with write(conn):
            row = conn.execute(_APPEND_READ, (job_id,)).fetchone()
            last_seq = _check_append(job_id, None if row is None else row[:3], owner)
            events = self._insert_events(conn, job_id, last_seq, drafts)
            if events or log_cursor is not None:
                conn.execute(
                    "UPDATE jobs SET last_seq = ?, log_cursor = coalesce(?, log_cursor) "
                    "WHERE id = ?",
                    (events[-1].seq if events else last_seq, log_cursor, job_id),
                )
            record = _record((row[3], last_seq))
            if events:
                record.last_seq = events[-1].seq
            if change is not None:
                change(record)
                record.updated_at = time.time()
                conn.execute(
                    "UPDATE jobs SET record = ?, status = ?, updated_at = ? WHERE id = ?",
                    (record.model_dump_json(), record.status.value, record.updated_at, job_id),
                )
        return record, events

    def _insert_events(
        self, conn: sqlite3.Connection, job_id: str, last_seq: int, drafts: Sequence[EventDraft]
    ) -> list[WireEvent]:
        wires, texts = self._make_events(job_id, last_seq, drafts)
        conn.executemany(
            "INSERT INTO events (job_id, seq, event) VALUES (?, ?, ?)",
            [(job_id, wire.seq, text) for wire, text in zip(wires, texts, strict=True)],
        )
        return wires

    @staticmethod
    def _make_events(
        job_id: str, last_seq: int, drafts: Sequence[EventDraft]
    ) -> tuple[list[WireEvent], list[str]]:
        """The drafts as events numbered after ``last_seq``: their wire form and stored JSON."""
        now = time.time()
        wires: list[WireEvent] = []
        texts: list[str] = []
        for seq, draft in enumerate(drafts, start=last_seq + 1):
            # A plain log line (most events) skips the model; anything else is validated.
            text = log_line_json(job_id, seq, now, draft)
            wire = None if text is None else _log_wire(seq, text)
            if text is None or wire is None:
                event = Event.model_validate({**draft, "job_id": job_id, "seq": seq, "time": now})
                text = wire_json(event)
                wire = WireEvent(seq, event.terminal, text.encode())
            texts.append(text)
            wires.append(wire)
        return wires, texts

    async def events(
        self, job_id: str, after: int = 0, limit: int | None = None
    ) -> tuple[list[Event], JobStatus]:
        """Events with ``seq > after`` in order, and the job's status read in the same snapshot
        (a terminal status means no event will follow the last one returned)."""
        return await self._call(self._events, job_id, after, limit)

    def _events(self, job_id: str, after: int, limit: int | None) -> tuple[list[Event], JobStatus]:
        head, rows, status = self._read_events(job_id, after, limit)  # parsed here, off the loop
        return head + [Event.model_validate_json(text) for _, text in rows], status

    async def wire_events(
        self, job_id: str, after: int = 0, limit: int | None = None
    ) -> tuple[list[WireEvent], JobStatus]:
        """:meth:`events` as the bytes followers are sent, not parsed (what a follower that
        fell behind reads, many times a second when many jobs print)."""
        return await self._call(self._wire_events, job_id, after, limit)

    def _wire_events(
        self, job_id: str, after: int, limit: int | None
    ) -> tuple[list[WireEvent], JobStatus]:
        head, rows, status = self._read_events(job_id, after, limit)
        wires = [WireEvent.of(event) for event in head]
        return wires + [WireEvent.stored(seq, text) for seq, text in rows], status

    def _read_events(
        self, job_id: str, after: int, limit: int | None
    ) -> tuple[list[Event], list[tuple[int, str]], JobStatus]:
        """The archived events (parsed), the rows after them (seq, JSON) and the status."""
        conn = self._conn()
        # A read transaction: the status and the events come from the same snapshot.
        conn.execute("BEGIN")
        try:
            row = conn.execute(
                "SELECT status, archived_seq FROM jobs WHERE id = ?", (job_id,)
            ).fetchone()
            if row is None:
                raise NotFound(f"no job {job_id!r}", field="job_id")
            # Events up to archived_seq are in the job's stored log (event_archive).
            head = event_archive.read_events(self.path.parent, job_id, after, limit, row[1])
            if head:
                after = row[1]
                limit = None if limit is None or limit < 0 else limit - len(head)
            rows = conn.execute(
                "SELECT seq, event FROM events WHERE job_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (job_id, after, -1 if limit is None else limit),
            ).fetchall()
        finally:
            conn.execute("COMMIT")
        return head, rows, JobStatus(row[0])

    async def last_seqs(self, job_ids: Sequence[str]) -> dict[str, int]:
        """Each job's newest ``seq``, for jobs that exist: what a follower's poller compares
        with to learn that another process wrote events (one indexed read for all jobs)."""
        return await self._call(self._last_seqs, list(job_ids))

    def _last_seqs(self, job_ids: list[str]) -> dict[str, int]:
        if not job_ids:
            return {}
        rows = (
            self._conn()
            .execute(
                # One JSON parameter however many jobs: no limit on bound variables to meet.
                "SELECT id, last_seq FROM jobs WHERE id IN (SELECT value FROM json_each(?))",
                (json.dumps(job_ids),),
            )
            .fetchall()
        )
        return {str(row[0]): int(row[1]) for row in rows}

    async def last_log_lines(self, job_id: str, count: int) -> list[str]:
        """The job's last ``count`` log lines, oldest first."""
        return await self._call(self._last_log_lines, job_id, count)

    def _last_log_lines(self, job_id: str, count: int) -> list[str]:
        conn = self._conn()
        conn.execute("BEGIN")
        try:
            rows = conn.execute(
                "SELECT json_extract(event, '$.text') FROM events WHERE job_id = ? "
                "AND json_extract(event, '$.kind') = 'log' ORDER BY seq DESC LIMIT ?",
                (job_id, count),
            ).fetchall()
            archived = conn.execute(
                "SELECT archived_seq FROM jobs WHERE id = ?", (job_id,)
            ).fetchone()
            head: list[str] = []
            if archived is not None and archived[0] > 0 and len(rows) < count:
                head = event_archive.last_log_lines(
                    self.path.parent, job_id, count - len(rows), archived[0]
                )
        finally:
            conn.execute("COMMIT")
        return head + [str(row[0]) for row in reversed(rows)]

    async def last_log_line_with(self, job_id: str, text: str) -> str | None:
        """The job's last log line that contains ``text`` (whole log, not yet compacted)."""
        return await self._call(self._last_log_line_with, job_id, text)

    def _last_log_line_with(self, job_id: str, text: str) -> str | None:
        escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        row = (
            self._conn()
            .execute(
                "SELECT json_extract(event, '$.text') FROM events WHERE job_id = ? "
                "AND json_extract(event, '$.kind') = 'log' "
                "AND json_extract(event, '$.text') LIKE ? ESCAPE '\\' ORDER BY seq DESC LIMIT 1",
                (job_id, f"%{escaped}%"),
            )
            .fetchone()
        )
        return str(row[0]) if row is not None else None

    async def log_cursor(self, job_id: str) -> str | None:
        """Where the scheduler's log was last read up to (persisted with the lines before it)."""
        return await self._call(self._log_cursor, job_id)

    def _log_cursor(self, job_id: str) -> str | None:
        row = self._conn().execute("SELECT log_cursor FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise NotFound(f"no job {job_id!r}", field="job_id")
        cursor: str | None = row[0]
        return cursor

    # ------------------------------------------------------------------ leases

    async def acquire_lease(self, job_id: str, owner: str, ttl_s: float) -> bool:
        """Take (or renew) the job's watcher lease unless another owner holds an unexpired one."""
        return await self._call(self._acquire_lease, job_id, owner, ttl_s)

    def _acquire_lease(self, job_id: str, owner: str, ttl_s: float) -> bool:
        conn = self._conn()
        now = time.time()
        with write(conn):
            row = conn.execute(
                "SELECT owner, expires FROM leases WHERE job_id = ?", (job_id,)
            ).fetchone()
            if row is not None and row[0] != owner and row[1] > now:
                return False
            conn.execute(
                "INSERT OR REPLACE INTO leases (job_id, owner, expires) VALUES (?, ?, ?)",
                (job_id, owner, now + ttl_s),
            )
        return True

    async def renew_lease(self, job_id: str, owner: str, ttl_s: float) -> bool:
        """Extend a lease this owner still holds; False when another process took it over."""
        return await self._call(self._renew_lease, job_id, owner, ttl_s)

    def _renew_lease(self, job_id: str, owner: str, ttl_s: float) -> bool:
        conn = self._conn()
        with write(conn):
            cursor = conn.execute(
                "UPDATE leases SET expires = ? WHERE job_id = ? AND owner = ?",
                (time.time() + ttl_s, job_id, owner),
            )
        return cursor.rowcount == 1

    async def release_lease(self, job_id: str, owner: str) -> None:
        await self._call(self._release_lease, job_id, owner)

    def _release_lease(self, job_id: str, owner: str) -> None:
        conn = self._conn()
        with write(conn):
            conn.execute("DELETE FROM leases WHERE job_id = ? AND owner = ?", (job_id, owner))

    async def lease_owner(self, job_id: str) -> str | None:
        """The owner of an unexpired lease on the job, if any."""
        return await self._call(self._lease_owner, job_id)

    def _lease_owner(self, job_id: str) -> str | None:
        row = (
            self._conn()
            .execute(
                "SELECT owner FROM leases WHERE job_id = ? AND expires > ?",
                (job_id, time.time()),
            )
            .fetchone()
        )
        return None if row is None else str(row[0])


def _log_wire(seq: int, text: str) -> WireEvent | None:
    try:
        return WireEvent(seq, False, text.encode())
    except UnicodeEncodeError:  # a lone surrogate: the model's path says what is wrong
        return None


def open_registry(data_path: Path) -> Registry:
    return Registry(data_path / REGISTRY_FILE)
