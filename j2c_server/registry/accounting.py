"""Which ended jobs have their usage record written, so none is left without one.

The driver that records a job's end writes its usage record right after (``usage/writer.py``);
a process killed between the two would leave the job unaccounted for ever, because no process
drives a job that has ended. So the registry keeps ``accounted_at`` per job: set once the end
record was written (or its writing gave up, logged and counted), and every service accounts for
the ended jobs still without it after a grace that lets a live driver do it first.
"""

from __future__ import annotations

import sqlite3
import time

from j2c_server.registry.connections import RegistryConnections
from j2c_server.registry.db import write
from j2c_server.registry.jobs_table import TERMINAL

# Oldest first, a page at a time: a backlog after a long outage is worked off in steps.
ACCOUNT_PAGE = 100


def unaccounted(
    conn: sqlite3.Connection, ended_before: float, terminal: tuple[str, ...]
) -> list[str]:
    """Ended jobs, last changed before ``ended_before``, whose usage record was not written."""
    marks = ",".join("?" * len(terminal))
    rows = conn.execute(
        f"SELECT id FROM jobs WHERE accounted_at IS NULL AND status IN ({marks}) "  # noqa: S608
        "AND updated_at < ? ORDER BY updated_at LIMIT ?",
        (*terminal, ended_before, ACCOUNT_PAGE),
    ).fetchall()
    return [row[0] for row in rows]


def mark_accounted(conn: sqlite3.Connection, job_id: str) -> None:
    with write(conn):
        conn.execute("UPDATE jobs SET accounted_at = ? WHERE id = ?", (time.time(), job_id))


class UsageAccounting:
    """The registry's queries of which ended jobs still want their usage record."""

    def __init__(self, db: RegistryConnections) -> None:
        self._db = db

    async def unaccounted_ended(self, ended_before: float) -> list[str]:
        """Ended jobs without their usage record, oldest first."""
        return await self._db.call(lambda: unaccounted(self._db.conn(), ended_before, TERMINAL))

    async def mark(self, job_id: str) -> None:
        await self._db.call(lambda: mark_accounted(self._db.conn(), job_id))
