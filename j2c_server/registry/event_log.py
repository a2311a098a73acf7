"""Each job's ordered event log: appends (with a record change, a log cursor, under a lease) and
reads (parsed, or as the bytes followers are sent), the archive's part included.

An event's ``seq`` is assigned inside the transaction that inserts it, so numbers never collide
between processes; events are persisted before anyone publishes them, so a follower replays
from any ``seq`` without a gap or a double. A job's log lines take the group commit
(:mod:`.batch`); events up to a finished job's ``archived_seq`` are read from its stored log
(:mod:`.archive`).
"""

from __future__ import annotations

import json
import string
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from j2c_server.core.errors import Conflict, NotFound
from j2c_server.registry import archive as event_archive
from j2c_server.registry.batch import Append, GroupCommit, JobRow, Outcome, write_batch
from j2c_server.registry.connections import RegistryConnections
from j2c_server.registry.db import write
from j2c_server.registry.event_rows import EventDraft, insert_events, make_events, split_row
from j2c_server.registry.jobs_table import record_from_row
from j2c_server.registry.leases import LeaseLost
from j2c_server.wire.api import Event, JobRecord, JobStatus, LineOrigin
from j2c_server.wire.event_frames import WireEvent, diary_text, json_string

RecordChange = Callable[[JobRecord], None]
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)  # as LIKE compares

# The rows from the one that holds event ?2 on, in order (?3 rows at most, -1: all).
_READ_ROWS = (
    "SELECT seq, span, event FROM events WHERE job_id = ?1 AND seq >= coalesce(("
    "SELECT seq FROM events WHERE job_id = ?1 AND seq <= ?2 ORDER BY seq DESC LIMIT 1), 0) "
    "ORDER BY seq LIMIT ?3"
)
_MAX_INTEGER = 2**63 - 1
# A job's rows, newest first.
_ROWS_BACKWARDS = "SELECT seq, span, event FROM events WHERE job_id = ? ORDER BY seq DESC"
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


def _log_texts_backwards(
    rows: Iterable[tuple[int, int, str]], *, j2c_only: bool = False
) -> Iterator[str]:
    """The log lines of ``rows`` (newest first) as the diary shows them, newest first;
    ``j2c_only``: j2c's lines only (never the job's output, whatever it printed)."""
    for seq, span, event in rows:
        for _, text in reversed(split_row(seq, span, event)):
            parsed = json.loads(text)
            if parsed.get("kind") != "log":
                continue
            if j2c_only and parsed.get("origin") != LineOrigin.j2c.value:
                continue
            yield diary_text(parsed)


class EventLog:
    """The jobs' events."""

    def __init__(self, db: RegistryConnections) -> None:
        self._db = db
        self._group_commit = GroupCommit(lambda appends: self._db.call(self._append_batch, appends))

    @property
    def path(self) -> Path:
        """The registry file (the compactor's rounds open their own connection to it)."""
        return self._db.path

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
        return await self._db.call(self._append, job_id, drafts, change, log_cursor, owner)

    async def append_many(
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

        conn = self._db.conn()
        with write(conn):
            return write_batch(conn, appends, check, make_events)

    def _append(
        self,
        job_id: str,
        drafts: Sequence[EventDraft],
        change: RecordChange | None,
        log_cursor: str | None,
        owner: str | None,
    ) -> tuple[JobRecord, list[WireEvent]]:
        conn = self._db.conn()
        with write(conn):
            row = conn.execute(_APPEND_READ, (job_id,)).fetchone()
            last_seq = _check_append(job_id, None if row is None else row[:3], owner)
            events = insert_events(conn, job_id, last_seq, drafts)
            if events or log_cursor is not None:
                conn.execute(
                    "UPDATE jobs SET last_seq = ?, log_cursor = coalesce(?, log_cursor) "
                    "WHERE id = ?",
                    (events[-1].seq if events else last_seq, log_cursor, job_id),
                )
            record = record_from_row((row[3], last_seq))
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

    async def read(
        self, job_id: str, after: int = 0, limit: int | None = None
    ) -> tuple[list[Event], JobStatus]:
        """Events with ``seq > after`` in order, and the job's status read in the same snapshot
        (a terminal status means no event will follow the last one returned)."""
        return await self._db.call(self._events, job_id, after, limit)

    def _events(self, job_id: str, after: int, limit: int | None) -> tuple[list[Event], JobStatus]:
        head, rows, status = self._read_events(job_id, after, limit)  # parsed here, off the loop
        return head + [Event.model_validate_json(text) for _, text in rows], status

    async def read_wire(
        self, job_id: str, after: int = 0, limit: int | None = None
    ) -> tuple[list[WireEvent], JobStatus]:
        """:meth:`events` as the bytes followers are sent, not parsed (what a follower that
        fell behind reads, many times a second when many jobs print)."""
        return await self._db.call(self._wire_events, job_id, after, limit)

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
        conn = self._db.conn()
        # A read transaction: the status and the events come from the same snapshot.
        conn.execute("BEGIN")
        try:
            row = conn.execute(
                "SELECT status, archived_seq FROM jobs WHERE id = ?", (job_id,)
            ).fetchone()
            if row is None:
                raise NotFound(f"no job {job_id!r}", field="job_id")
            # Events up to archived_seq are in the job's stored log (event_archive).
            head = event_archive.read_events(self._db.path.parent, job_id, after, limit, row[1])
            if head:
                after = row[1]
                limit = None if limit is None or limit < 0 else limit - len(head)
            # From the row that holds event after + 1 (a row holds span events from its seq):
            # at most limit rows hold the limit events wanted.
            first = min(after, _MAX_INTEGER - 1) + 1  # SQLite's integers end at 2**63 - 1
            stored = conn.execute(_READ_ROWS, (job_id, first, -1 if limit is None else limit))
            rows = [
                (seq, text)
                for first, span, event in stored
                for seq, text in split_row(first, span, event)
                if seq > after
            ]
        finally:
            conn.execute("COMMIT")
        if limit is not None and limit >= 0:
            del rows[limit:]
        return head, rows, JobStatus(row[0])

    async def last_seqs(self, job_ids: Sequence[str]) -> dict[str, int]:
        """Each job's newest ``seq``, for jobs that exist: what a follower's poller compares
        with to learn that another process wrote events (one indexed read for all jobs)."""
        return await self._db.call(self._last_seqs, list(job_ids))

    def _last_seqs(self, job_ids: list[str]) -> dict[str, int]:
        if not job_ids:
            return {}
        rows = (
            self._db.conn()
            .execute(
                # One JSON parameter however many jobs: no limit on bound variables to meet.
                "SELECT id, last_seq FROM jobs WHERE id IN (SELECT value FROM json_each(?))",
                (json.dumps(job_ids),),
            )
            .fetchall()
        )
        return {str(row[0]): int(row[1]) for row in rows}

    async def last_log_lines(self, job_id: str, count: int) -> list[str]:
        """The job's last ``count`` log lines as the diary shows them, oldest first."""
        return await self._db.call(self._last_log_lines, job_id, count)

    def _last_log_lines(self, job_id: str, count: int) -> list[str]:
        conn = self._db.conn()
        conn.execute("BEGIN")
        try:
            rows: list[str] = []  # newest first
            if count > 0:
                for text in _log_texts_backwards(conn.execute(_ROWS_BACKWARDS, (job_id,))):
                    rows.append(text)
                    if len(rows) == count:
                        break
            archived = conn.execute(
                "SELECT archived_seq FROM jobs WHERE id = ?", (job_id,)
            ).fetchone()
            head: list[str] = []
            if archived is not None and archived[0] > 0 and len(rows) < count:
                head = event_archive.last_log_lines(
                    self._db.path.parent, job_id, count - len(rows), archived[0]
                )
        finally:
            conn.execute("COMMIT")
        return head + rows[::-1]

    async def last_log_line_with(
        self, job_id: str, text: str, *, j2c_only: bool = False
    ) -> str | None:
        """The job's last log line that contains ``text`` (whole log, not yet compacted), as
        the diary shows it; ``j2c_only``: among j2c's lines only."""
        return await self._db.call(self._last_log_line_with, job_id, text, j2c_only)

    def _last_log_line_with(self, job_id: str, text: str, j2c_only: bool = False) -> str | None:
        # Rows whose JSON holds the text as JSON writes it (LIKE: ASCII letters in either
        # case), newest first; then their log lines that hold it.
        needle = json_string(text)[1:-1]
        escaped = needle.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        rows = self._db.conn().execute(
            "SELECT seq, span, event FROM events WHERE job_id = ? AND event LIKE ? ESCAPE '\\' "
            "ORDER BY seq DESC",
            (job_id, f"%{escaped}%"),
        )
        wanted = text.translate(_ASCII_LOWER)
        for line in _log_texts_backwards(rows, j2c_only=j2c_only):
            if wanted in line.translate(_ASCII_LOWER):
                return line
        return None

    async def log_cursor(self, job_id: str) -> str | None:
        """Where the scheduler's log was last read up to (persisted with the lines before it)."""
        return await self._db.call(self._log_cursor, job_id)

    def _log_cursor(self, job_id: str) -> str | None:
        row = (
            self._db.conn()
            .execute("SELECT log_cursor FROM jobs WHERE id = ?", (job_id,))
            .fetchone()
        )
        if row is None:
            raise NotFound(f"no job {job_id!r}", field="job_id")
        cursor: str | None = row[0]
        return cursor
