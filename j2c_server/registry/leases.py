"""Watcher leases: which process drives a job, by one ``leases`` row per job with an expiry.

A process takes (or renews) a job's lease unless another owner holds an unexpired one; jobs
still going whose lease is free or expired are the ones any peer adopts. Appends made with an
``owner`` are refused with :class:`LeaseLost` once that owner no longer holds it
(:mod:`.event_log`).
"""

from __future__ import annotations

import time

from j2c_server.core.coalesce import Answers, Coalesced
from j2c_server.core.errors import J2CError
from j2c_server.registry.connections import RegistryConnections
from j2c_server.registry.db import write
from j2c_server.registry.jobs_table import TERMINAL

_Renewal = tuple[str, str, float]  # job id, owner, ttl


class LeaseLost(J2CError):
    """Another process owns this job's lease now; the writer must stop watching it."""

    status_code = 409
    code = "lease_lost"


class Leases:
    """The jobs' watcher leases."""

    def __init__(self, db: RegistryConnections) -> None:
        self._db = db

    async def acquire(self, job_id: str, owner: str, ttl_s: float) -> bool:
        """Take (or renew) the job's watcher lease unless another owner holds an unexpired one."""
        return await self._db.call(self._acquire_lease, job_id, owner, ttl_s)

    def _acquire_lease(self, job_id: str, owner: str, ttl_s: float) -> bool:
        conn = self._db.conn()
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

    async def renew(self, job_id: str, owner: str, ttl_s: float) -> bool:
        """Extend a lease this owner still holds; False when another process took it over.
        The renewals asked for in one loop step share one transaction and one thread hop."""
        renewals: Coalesced[_Renewal, bool] | None = getattr(self, "_renewals", None)
        if renewals is None:
            renewals = self._renewals = Coalesced(lambda keys: self._db.call(self._renew, keys))
        return await renewals((job_id, owner, ttl_s))

    def _renew(self, renewals: list[_Renewal]) -> Answers[_Renewal, bool]:
        conn = self._db.conn()
        now = time.time()
        with write(conn):
            return {
                (job_id, owner, ttl_s): conn.execute(
                    "UPDATE leases SET expires = ? WHERE job_id = ? AND owner = ?",
                    (now + ttl_s, job_id, owner),
                ).rowcount
                == 1
                for job_id, owner, ttl_s in renewals
            }

    async def release(self, job_id: str, owner: str) -> None:
        await self._db.call(self._release_lease, job_id, owner)

    def _release_lease(self, job_id: str, owner: str) -> None:
        conn = self._db.conn()
        with write(conn):
            conn.execute("DELETE FROM leases WHERE job_id = ? AND owner = ?", (job_id, owner))

    async def owner(self, job_id: str) -> str | None:
        """The owner of an unexpired lease on the job, if any."""
        return await self._db.call(self._lease_owner, job_id)

    def _lease_owner(self, job_id: str) -> str | None:
        row = (
            self._db.conn()
            .execute(
                "SELECT owner FROM leases WHERE job_id = ? AND expires > ?",
                (job_id, time.time()),
            )
            .fetchone()
        )
        return None if row is None else str(row[0])

    async def unowned_active(self) -> list[str]:
        """Jobs still going whose watcher lease is free or expired: nobody is driving them."""
        return await self._db.call(self._unowned_active_jobs)

    def _unowned_active_jobs(self) -> list[str]:
        marks = ",".join("?" * len(TERMINAL))
        rows = (
            self._db.conn()
            .execute(
                f"SELECT id FROM jobs WHERE status NOT IN ({marks}) AND NOT EXISTS "  # noqa: S608
                "(SELECT 1 FROM leases WHERE leases.job_id = jobs.id AND leases.expires > ?) "
                "ORDER BY created_at",
                (*TERMINAL, time.time()),
            )
            .fetchall()
        )
        return [row[0] for row in rows]
