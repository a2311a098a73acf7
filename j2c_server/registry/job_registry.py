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

:class:`Registry` is the one object the rest of j2c holds, made of one part per table over one
pool of connections (:mod:`.connections`; the file, write transactions and the versioned schema
in :mod:`.db`): ``registry.jobs`` (:mod:`.jobs_table`), ``registry.events`` (:mod:`.event_log`,
the group commit's batched statements in :mod:`.batch`), ``registry.leases`` (:mod:`.leases`)
and ``registry.accounting``, the usage-record bookkeeping (:mod:`.accounting`).
"""

from __future__ import annotations

from pathlib import Path

from j2c_server.registry.accounting import UsageAccounting
from j2c_server.registry.connections import RegistryConnections
from j2c_server.registry.db import REGISTRY_FILE
from j2c_server.registry.event_log import EventLog
from j2c_server.registry.jobs_table import JobsTable
from j2c_server.registry.leases import Leases

__all__ = ["REGISTRY_FILE", "Registry", "open_registry"]


class Registry:
    """Async access to the registry file by table; every call is one short transaction in a
    thread of the shared pool."""

    def __init__(self, path: Path, *, threads: int = 2) -> None:
        self.db = RegistryConnections(path, threads=threads)
        self.jobs = JobsTable(self.db)
        self.events = EventLog(self.db)
        self.leases = Leases(self.db)
        self.accounting = UsageAccounting(self.db)

    @property
    def path(self) -> Path:
        return self.db.path

    def close(self) -> None:
        """Wait for the calls in flight, then close every connection."""
        self.db.close()


def open_registry(data_path: Path) -> Registry:
    return Registry(data_path / REGISTRY_FILE)
