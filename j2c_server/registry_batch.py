"""Group commit of log lines: the appends of every job that wait at one moment go in one
transaction.

A watcher appends each batch of its job's lines as they are read. With many jobs printing, one
transaction and one thread hop per batch were most of what a line cost the server; appends that
queue up while a transaction runs now share the next one. Each append keeps its own checks and
outcome (a savepoint): one job's refusal (its lease lost, the job already finished) never undoes
or fails another job's lines. With one job printing, nothing waits: each append is its own
transaction, as before.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .wire_event import WireEvent

MAX_APPENDS = 256  # per transaction: a long queue is drained in several, not one long lock


@dataclass(frozen=True)
class Append:
    job_id: str
    drafts: Sequence[Any]
    log_cursor: str | None
    owner: str | None


Outcome = list[WireEvent] | Exception
ApplyOne = Callable[[sqlite3.Connection, Append], list[WireEvent]]


def apply_batch(conn: sqlite3.Connection, appends: list[Append], apply: ApplyOne) -> list[Outcome]:
    """Run every append in one write transaction, each under its own savepoint."""
    conn.execute("BEGIN IMMEDIATE")
    outcomes: list[Outcome] = []
    try:
        for append in appends:
            conn.execute("SAVEPOINT one_append")
            try:
                outcomes.append(apply(conn, append))
            except Exception as exc:  # this append's own answer; the others go on
                conn.execute("ROLLBACK TO one_append")
                outcomes.append(exc)
            conn.execute("RELEASE one_append")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
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
