"""The registry's ``jobs`` table: a job created (or an identical request attached to one), read,
listed, compared with earlier jobs of its project, and removed once finished.

A row holds the job's record as JSON beside the columns the queries filter on (key, status,
timestamps, last ``seq``). Events are :mod:`.event_log`'s, leases :mod:`.leases`'.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import NamedTuple

from j2c_server.core.coalesce import Answers, Coalesced
from j2c_server.core.errors import Conflict, NotFound
from j2c_server.registry import archive as event_archive
from j2c_server.registry import paging as registry_paging
from j2c_server.registry.connections import RegistryConnections
from j2c_server.registry.db import write
from j2c_server.registry.event_rows import EventDraft, insert_events
from j2c_server.wire.api import TERMINAL_STATUSES, JobRecord, JobStatus

TERMINAL = tuple(sorted(s.value for s in TERMINAL_STATUSES))


class JobState(NamedTuple):
    """A job's status and message: the two fields of its record read without parsing it."""

    status: JobStatus
    message: str | None


def record_from_row(row: tuple[str, int]) -> JobRecord:
    """A job's record from its ``(record, last_seq)`` columns."""
    record = JobRecord.model_validate_json(row[0])
    record.last_seq = row[1]
    return record


class JobsTable:
    """The jobs' records."""

    def __init__(self, db: RegistryConnections) -> None:
        self._db = db

    async def create_or_attach(
        self, record: JobRecord, first: EventDraft, attach_to: Collection[JobStatus] = ()
    ) -> tuple[JobRecord, bool]:
        """Insert ``record`` with its first event, or return the newest job with its key whose
        status is one of ``attach_to`` (the send rule's, ``jobs/send/rule.py``), in one
        transaction. Returns the record and whether it was created."""
        statuses = tuple(sorted(s.value for s in attach_to))
        return await self._db.call(self._create_or_attach, record, first, statuses)

    def _create_or_attach(
        self, record: JobRecord, first: EventDraft, statuses: tuple[str, ...]
    ) -> tuple[JobRecord, bool]:
        conn = self._db.conn()
        with write(conn):
            if statuses:
                marks = ",".join("?" * len(statuses))
                row = conn.execute(
                    f"SELECT record, last_seq FROM jobs WHERE key = ? AND status IN ({marks}) "  # noqa: S608
                    "ORDER BY created_at DESC LIMIT 1",
                    (record.key, *statuses),
                ).fetchone()
                if row is not None:
                    return record_from_row(row), False
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
            insert_events(conn, record.id, 0, [first])
            conn.execute("UPDATE jobs SET last_seq = 1 WHERE id = ?", (record.id,))
            record.last_seq = 1
        return record, True

    async def get(self, job_id: str) -> JobRecord:
        return await self._db.call(self._get, job_id)

    async def state(self, job_id: str) -> JobState:
        """The job's status and message, without parsing its record: what the job's driver
        looks at every second (a record parse per job per second adds up at a hundred jobs).
        The reads of every job asked for in one loop step are one query in one thread hop."""
        reads: Coalesced[str, JobState] | None = getattr(self, "_state_reads", None)
        if reads is None:
            reads = self._state_reads = Coalesced(lambda ids: self._db.call(self._states, ids))
        return await reads(job_id)

    def _states(self, job_ids: list[str]) -> Answers[str, JobState]:
        rows = self._db.conn().execute(
            "SELECT id, status, json_extract(record, '$.message') FROM jobs "
            "WHERE id IN (SELECT value FROM json_each(?))",
            (json.dumps(job_ids),),
        )
        found: Answers[str, JobState] = {
            job_id: JobState(JobStatus(status), message) for job_id, status, message in rows
        }
        for job_id in job_ids:
            if job_id not in found:
                found[job_id] = NotFound(f"no job {job_id!r}", field="job_id")
        return found

    def _get(self, job_id: str) -> JobRecord:
        row = (
            self._db.conn()
            .execute("SELECT record, last_seq FROM jobs WHERE id = ?", (job_id,))
            .fetchone()
        )
        if row is None:
            raise NotFound(f"no job {job_id!r}", field="job_id")
        return record_from_row(row)

    async def all(self) -> list[JobRecord]:
        """Every job, newest first."""
        return await self._db.call(self._all_jobs)

    def _all_jobs(self) -> list[JobRecord]:
        rows = (
            self._db.conn()
            .execute("SELECT record, last_seq FROM jobs ORDER BY created_at DESC")
            .fetchall()
        )
        return [record_from_row(row) for row in rows]

    async def page(
        self, limit: int, before: registry_paging.Cursor | None = None
    ) -> registry_paging.Page:
        """At most ``limit`` jobs, newest first, older than ``before`` (registry_paging)."""
        return await self._db.call(
            lambda: registry_paging.read_page(self._db.conn(), limit, before)
        )

    async def previous(self, record: JobRecord) -> JobRecord | None:
        """The latest job for the same project created before ``record``: what a run is
        compared with to explain what it reuses and what it re-runs."""
        return await self._db.call(self._previous, record)

    def _previous(self, record: JobRecord) -> JobRecord | None:
        return self._first_record(
            "SELECT record, last_seq FROM jobs WHERE id != ? AND created_at <= ? "
            "AND json_extract(record, '$.request.code_path') = ? "
            "ORDER BY created_at DESC LIMIT 1",
            (record.id, record.created_at, record.request.code_path),
        )

    async def latest_like(self, record: JobRecord) -> JobRecord | None:
        """What a send is compared with: the latest job with the same settings
        (``request_key``), else the latest job of the same project."""
        return await self._db.call(self._latest_like, record)

    def _latest_like(self, record: JobRecord) -> JobRecord | None:
        return self._first_record(
            "SELECT record, last_seq FROM jobs "
            "WHERE json_extract(record, '$.request.code_path') = ? "
            "ORDER BY json_extract(record, '$.request_key') = ? DESC, created_at DESC "
            "LIMIT 1",
            (record.request.code_path, record.request_key),
        )

    def _first_record(self, query: str, params: tuple[object, ...]) -> JobRecord | None:
        """The record of the first row ``query`` (selecting ``record, last_seq``) finds."""
        row = self._db.conn().execute(query, params).fetchone()
        return None if row is None else record_from_row(row)

    async def remove(self, job_id: str) -> None:
        """Delete a finished job, its events and its lease; a job still going is a Conflict."""
        await self._db.call(self._remove, job_id)

    def _remove(self, job_id: str) -> None:
        conn = self._db.conn()
        with write(conn):
            row = conn.execute("SELECT status FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                raise NotFound(f"no job {job_id!r}", field="job_id")
            if row[0] not in TERMINAL:
                raise Conflict(
                    f"job {job_id} is {row[0]}; cancel it or wait for it to finish before "
                    "removing it",
                    field="job_id",
                )
            for table, column in (("events", "job_id"), ("leases", "job_id"), ("jobs", "id")):
                conn.execute(f"DELETE FROM {table} WHERE {column} = ?", (job_id,))  # noqa: S608
        event_archive.remove_archive(self._db.path.parent, job_id)
