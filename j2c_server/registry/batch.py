"""Group commit of log lines: the appends of every job that wait at one moment go in one
transaction, written with three statements however many appends and lines it holds.

A watcher appends each batch of its job's lines as they are read. With many jobs printing, one
transaction and one thread hop per batch were most of what a line cost the server; appends that
queue up while a transaction runs now share the next one. In that transaction every append's
job is read in one query, each append is checked and numbered here, in order (one job's refusal:
its lease lost, the job finished or removed, never touches another's lines), and then all the
accepted events are inserted and all the jobs' seqs and cursors set in one statement each (rows
passed as one JSON array). Row by row, a hundred jobs' lines were thousands of statements a
second, each a release and re-take of the GIL that the event loop also wants. With one job
printing, nothing waits: each append is its own transaction.

An append's events are stored as one row (:func:`.event_rows.batch_row`: its first ``seq``, how
many, their JSON texts joined by newlines): a hundred jobs printing were ten thousand rows a
second, and inserting them (the primary key's B-tree, the row's JSON pulled apart) was 40 % of
the server's CPU; a row per watcher batch is five to ten times fewer.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from j2c_server.registry.event_rows import EventRow, batch_row
from j2c_server.wire.event_frames import WireEvent

MAX_APPENDS = 256  # per transaction: a long queue is drained in several, not one long lock

_READ_JOBS = (
    "SELECT j.id, j.last_seq, j.status, l.owner FROM jobs j LEFT JOIN leases l ON l.job_id = j.id "
    "WHERE j.id IN (SELECT value FROM json_each(?))"
)
_INSERT_EVENTS = (
    "INSERT INTO events (job_id, seq, span, event) SELECT json_extract(value, '$[0]'), "
    "json_extract(value, '$[1]'), json_extract(value, '$[2]'), json_extract(value, '$[3]') "
    "FROM json_each(?)"
)
_SET_SEQS = (
    "UPDATE jobs SET last_seq = json_extract(u.value, '$[1]'), "
    "log_cursor = coalesce(json_extract(u.value, '$[2]'), log_cursor) "
    "FROM json_each(?) AS u WHERE jobs.id = json_extract(u.value, '$[0]')"
)


@dataclass(frozen=True)
class Append:
    job_id: str
    drafts: Sequence[Any]
    log_cursor: str | None
    owner: str | None


Outcome = list[WireEvent] | Exception
# (last_seq, status, lease owner) of a job, or None: what an append is checked against.
JobRow = tuple[int, str, str | None]
# Refuses an append (raises) or returns the job's last seq.
Check = Callable[[Append, JobRow | None], int]
# A job's drafts numbered after a seq: the wire events and the JSON texts to store.
MakeEvents = Callable[[str, int, Sequence[Any]], tuple[list[WireEvent], list[str]]]


def write_batch(
    conn: sqlite3.Connection, appends: list[Append], check: Check, make: MakeEvents
) -> list[Outcome]:
    """Every append, inside the caller's write transaction; each its own outcome."""
    ids = sorted({append.job_id for append in appends})
    jobs: dict[str, JobRow] = {
        job_id: (int(seq), status, owner)
        for job_id, seq, status, owner in conn.execute(_READ_JOBS, (json.dumps(ids),))
    }
    rows: list[EventRow] = []
    seqs: dict[str, list[Any]] = {}  # job -> [job, last seq, cursor] after this batch
    outcomes: list[Outcome] = []
    for append in appends:
        job = jobs.get(append.job_id)
        try:
            last_seq = check(append, job)
            wires, texts = make(append.job_id, last_seq, append.drafts)
        except Exception as exc:  # this append's own answer; the others go on
            outcomes.append(exc)
            continue
        outcomes.append(wires)
        if job is not None and wires:
            jobs[append.job_id] = (wires[-1].seq, job[1], job[2])
        if wires:
            rows.append(batch_row(append.job_id, wires[0].seq, texts))
        if wires or append.log_cursor is not None:
            update = seqs.setdefault(append.job_id, [append.job_id, last_seq, None])
            if wires:
                update[1] = wires[-1].seq
            if append.log_cursor is not None:
                update[2] = append.log_cursor
    if rows:
        conn.execute(_INSERT_EVENTS, (json.dumps(rows, ensure_ascii=False),))
    if seqs:
        conn.execute(_SET_SEQS, (json.dumps(list(seqs.values()), ensure_ascii=False),))
    return outcomes


class GroupCommit:
    """Queues appends; one drain at a time runs what is queued as one batch (in a thread, via
    ``run_batch``), so appends that arrive meanwhile go together in the next one."""

    def __init__(self, run_batch: Callable[[list[Append]], Awaitable[list[Outcome]]]) -> None:
        self._run_batch = run_batch
        self._queue: list[tuple[Append, asyncio.Future[list[WireEvent]]]] = []
        self._drain: asyncio.Task[None] | None = None

    async def append(self, append: Append) -> list[WireEvent]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[WireEvent]] = loop.create_future()
        self._queue.append((append, future))
        # A drain left by another event loop (a CLI's earlier asyncio.run) is not this one's.
        if self._drain is None or self._drain.done() or self._drain.get_loop() is not loop:
            self._drain = loop.create_task(self._drain_queue())
        return await future

    async def _drain_queue(self) -> None:
        while self._queue:
            batch, self._queue = self._queue[:MAX_APPENDS], self._queue[MAX_APPENDS:]
            try:
                outcomes = await self._run_batch([append for append, _ in batch])
            except Exception as exc:  # e.g. the file locked past busy_timeout: every waiter
                outcomes = [exc] * len(batch)
            for (_, future), outcome in zip(batch, outcomes, strict=True):
                if future.done():  # its caller was cancelled; the lines are written anyway
                    continue
                if isinstance(outcome, Exception):
                    future.set_exception(outcome)
                else:
                    future.set_result(outcome)
