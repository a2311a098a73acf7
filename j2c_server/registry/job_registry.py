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

:class:`Registry` is the one object the rest of j2c holds; its statements live by table: the
file, its connections, write transactions and the versioned schema in :mod:`.db`, the pool in
:mod:`.connections`, the ``jobs`` table in :mod:`.jobs_table`, the events in :mod:`.event_log`
(the group commit's batched statements in :mod:`.batch`), the leases in :mod:`.leases` and the
usage-record bookkeeping in :mod:`.accounting`.
"""

from __future__ import annotations

from pathlib import Path

from j2c_server.registry.accounting import UsageAccounting
from j2c_server.registry.db import REGISTRY_FILE
from j2c_server.registry.event_log import EventLog
from j2c_server.registry.jobs_table import JobsTable
from j2c_server.registry.leases import Leases

__all__ = ["REGISTRY_FILE", "Registry", "open_registry"]


class Registry(JobsTable, EventLog, Leases, UsageAccounting):
    """Async access to the registry file; every method is one short transaction in a thread."""


def open_registry(data_path: Path) -> Registry:
    return Registry(data_path / REGISTRY_FILE)
