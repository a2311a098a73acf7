"""What a :class:`~.service.JobService` holds, and its life: built over the registry, started
(the adoption sweep: jobs nobody drives, ended jobs nobody accounted for), stopped without
cancelling a job, and the drivers of the jobs this process drives.

Every process that touches jobs runs a full service of its own over one registry file, so
whoever notices a job without a live lease drives it (:class:`~.lease.JobDriver`: one process
at a time, by the lease row).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from j2c_server.config import J2CSettings
from j2c_server.core.errors import J2CError
from j2c_server.jobs.audit import local_actor
from j2c_server.jobs.clients import Clients
from j2c_server.jobs.drive.lease import LEASE_TTL_S, JobDriver, account_ended, new_owner
from j2c_server.jobs.drive.watch import Log
from j2c_server.jobs.fanout import EventBus, Fanout
from j2c_server.registry.job_registry import open_registry

ADOPT_EVERY_S = LEASE_TTL_S / 2
# A live driver writes an ended job's usage record within seconds (retries included); after
# this, any service writes it (the driver died first).
ACCOUNT_GRACE_S = 20.0
FINISH_WAIT_S = 15.0  # at most, for a driver that is writing an ended job's usage record


class ServiceLifecycle:
    """The service's parts, its start and stop, and the jobs it drives."""

    def __init__(
        self,
        settings: J2CSettings,
        root_dir: str | None = None,
        log: Log | None = None,
        *,
        frontend: str = "python",
    ) -> None:
        self.settings = settings
        # Who acts when a call names nobody: this process's user (the CLI, %j2c).
        self.actor = local_actor(frontend)
        self.root_dir = root_dir
        self.log: Log = log or logging.getLogger("j2c")
        self.registry = open_registry(settings.data_path())
        self.bus = EventBus()
        self.fanout = Fanout(
            self.registry,
            self.bus,
            spawn=self._spawn,
            on_idle=self._take_over_if_unwatched,
            idle_s=LEASE_TTL_S,
        )
        self.owner = new_owner()
        # A CLI command is one send its user waits for, with no event loop to keep responsive:
        # it packs in its own process (jobs/drive/pack_worker.py says why).
        self.clients = Clients(settings, in_process=frontend == "cli")
        self.clients.drive = self._drive  # a sweep's parent hands each submitted variant over
        self._drivers: dict[str, JobDriver] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self._started = False
        self._stopping = False

    def start(self) -> None:
        """Re-attach to jobs nobody drives (now, and whenever a lease expires later).
        Call with the event loop running; ``stop()`` ends it."""
        if self._started:
            return
        self._started = True
        self.clients.packers.warm()
        self._spawn(self._adopt_forever(), "j2c-adopt")

    async def stop(self) -> None:
        """Stop driving jobs without cancelling them: their leases are released, so another
        process (a restarted server, a detached watcher) takes over at once."""
        if self._stopping:
            return
        self._stopping = True
        self.fanout.close()
        await self._let_ended_jobs_finish()
        tasks = list(self._background)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.clients.close()
        await asyncio.to_thread(self.registry.close)  # waits for calls in flight

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

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def _adopt_forever(self) -> None:
        while True:
            for job_id in await self.registry.leases.unowned_active():
                self._drive(job_id)
            # Ended jobs whose driver died before writing their usage record.
            ended_before = time.time() - ACCOUNT_GRACE_S
            for job_id in await self.registry.accounting.unaccounted_ended(ended_before):
                await account_ended(job_id, self.registry, self.settings, self.clients, self.log)
            await asyncio.sleep(ADOPT_EVERY_S)

    def _drive(self, job_id: str) -> None:
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
        )
        self._drivers[job_id] = driver
        driver.task = self._spawn(driver.run(), f"j2c-job-{job_id}")
        driver.task.add_done_callback(lambda _: self._forget(job_id, driver))

    def _forget(self, job_id: str, driver: JobDriver) -> None:
        if self._drivers.get(job_id) is driver:
            del self._drivers[job_id]

    async def _take_over_if_unwatched(self, job_id: str) -> None:
        """A followed job quiet for a lease's time: drive it here if nobody does."""
        if await self.registry.leases.owner(job_id) is None:
            self._drive(job_id)
