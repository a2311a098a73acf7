"""The jobs this process drives: one :class:`~.lease.JobDriver` per job, the background tasks
they run in, and the adoption sweep that finds jobs nobody drives (and ended jobs nobody
accounted for).

Every process that touches jobs runs a full service of its own over one registry, so whoever
notices a job without a live lease drives it (:class:`~.lease.JobDriver`: one process at a time,
by the lease row). Stopping stops driving without cancelling a job: the leases are released and
the next process takes over.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from j2c_server.config import J2CSettings
from j2c_server.core.errors import J2CError
from j2c_server.jobs.children import ChildJobs, Family
from j2c_server.jobs.clients import Clients
from j2c_server.jobs.drive.lease import LEASE_TTL_S, JobDriver, account_ended, new_owner
from j2c_server.jobs.drive.watch import Log
from j2c_server.jobs.fanout import EventBus
from j2c_server.registry.job_registry import Registry

ADOPT_EVERY_S = LEASE_TTL_S / 2
# A live driver writes an ended job's usage record within seconds (retries included); after
# this, any service writes it (the driver died first).
ACCOUNT_GRACE_S = 20.0
FINISH_WAIT_S = 15.0  # at most, for a driver that is writing an ended job's usage record


class Drivers:
    """This process's drivers and background tasks."""

    def __init__(
        self,
        settings: J2CSettings,
        registry: Registry,
        bus: EventBus,
        clients: Clients,
        log: Log,
        children: ChildJobs,
    ) -> None:
        self.settings = settings
        self.registry = registry
        self.bus = bus
        self.clients = clients
        self.log = log
        self.children = children
        self.owner = new_owner()
        self.family = Family(settings, registry, bus, clients, self.drive)
        self._drivers: dict[str, JobDriver] = {}
        self._background: set[asyncio.Task[Any]] = set()

    def start(self) -> None:
        """Re-attach to jobs nobody drives (now, and whenever a lease expires later)."""
        self.spawn(self._adopt_forever(), "j2c-adopt")

    async def stop(self) -> None:
        """Wait a little for drivers writing an ended job's usage record, then stop every
        task: the jobs go on, their leases are released."""
        await self._let_ended_jobs_finish()
        tasks = list(self._background)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def get(self, job_id: str) -> JobDriver | None:
        return self._drivers.get(job_id)

    def spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    def drive(self, job_id: str) -> None:
        """Drive ``job_id`` here unless this process already does (the lease decides between
        processes)."""
        driver = self._drivers.get(job_id)
        if driver is not None and driver.task is not None and not driver.task.done():
            return
        driver = JobDriver(
            job_id,
            owner=self.owner,
            registry=self.registry,
            bus=self.bus,
            settings=self.settings,
            clients=self.clients,
            log=self.log,
            children=self.children,
            family=self.family,
        )
        self._drivers[job_id] = driver
        driver.task = self.spawn(driver.run(), f"j2c-job-{job_id}")
        driver.task.add_done_callback(lambda _: self._forget(job_id, driver))

    async def take_over_if_unwatched(self, job_id: str) -> None:
        """A followed job quiet for a lease's time: drive it here if nobody does."""
        if await self.registry.leases.owner(job_id) is None:
            self.drive(job_id)

    def _forget(self, job_id: str, driver: JobDriver) -> None:
        if self._drivers.get(job_id) is driver:
            del self._drivers[job_id]

    async def _let_ended_jobs_finish(self) -> None:
        """A job that has just ended (a CLI exits on its last event) still has its driver
        writing the usage record: wait a little for those drivers, not for running jobs."""
        ending: list[asyncio.Task[None]] = []
        for job_id, driver in list(self._drivers.items()):
            if driver.task is None or driver.task.done():
                continue
            with contextlib.suppress(J2CError):
                if (await self.registry.jobs.get(job_id)).status.terminal:
                    ending.append(driver.task)
        if ending:
            await asyncio.wait(ending, timeout=FINISH_WAIT_S)

    async def _adopt_forever(self) -> None:
        while True:
            for job_id in await self.registry.leases.unowned_active():
                self.drive(job_id)
            # Ended jobs whose driver died before writing their usage record.
            ended_before = time.time() - ACCOUNT_GRACE_S
            for job_id in await self.registry.accounting.unaccounted_ended(ended_before):
                await account_ended(job_id, self.registry, self.settings, self.clients, self.log)
            await asyncio.sleep(ADOPT_EVERY_S)
