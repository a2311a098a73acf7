"""What one service shares between all its jobs: the object store and scheduler clients, and the
packing processes with the limit on concurrent packs."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from j2c_server.config import J2CSettings
from j2c_server.jobs.pack_worker import PackWorkers, Scan
from j2c_server.schedulers import make_scheduler
from j2c_server.schedulers.base import Scheduler
from j2c_server.storage import open_store
from j2c_server.storage.base import ObjectStore


class Clients:
    """Opens each client on first use and closes them all at the end."""

    def __init__(self, settings: J2CSettings, *, in_process: bool = False) -> None:
        self.settings = settings
        limit = settings.pack.max_concurrent_packs
        self.pack_slots = asyncio.Semaphore(limit)
        # One more worker than packs: a preflight never waits behind a long pack.
        self.packers = PackWorkers(limit + 1, in_process=in_process)
        # A send's scan, by job id, until that job's pipeline packs from it.
        self.scans: dict[str, Scan] = {}
        self._store: ObjectStore | None = None
        self._schedulers: dict[str, Scheduler] = {}
        # Set by the service: start watching a job here (a sweep's submitted variants).
        self.drive: Callable[[str], None] | None = None

    def store(self) -> ObjectStore:
        if self._store is None:
            self._store = open_store(self.settings.storage_url(), self.settings.storage)
        return self._store

    def scheduler(self, name: str) -> Scheduler:
        if name not in self._schedulers:
            self._schedulers[name] = make_scheduler(name, self.settings)
        return self._schedulers[name]

    async def close(self) -> None:
        await self.packers.close()
        for scheduler in self._schedulers.values():
            await scheduler.close()
        self._schedulers.clear()
        if self._store is not None:
            await self._store.close()
            self._store = None
