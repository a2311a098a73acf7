"""How the registry's async API reaches SQLite: a small thread pool, one connection per thread.

sqlite calls block, so every part of the :class:`~.job_registry.Registry` runs its statements in
a pool thread (:meth:`RegistryConnections.call`) and the server's event loop never waits on the
disk; each thread keeps its own connection (:func:`.db.connect`). Opening the file makes it the
user's alone and brings its schema up to date (:func:`.db.migrate`). The registry's parts
(:mod:`.jobs_table`, :mod:`.event_log`, :mod:`.leases`, :mod:`.accounting`) each hold this one
object.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from j2c_server.core.file_modes import private_dir, private_file, tighten_file
from j2c_server.registry.db import connect, migrate

T = TypeVar("T")


class RegistryConnections:
    """The registry file, its pool and its per-thread connections."""

    def __init__(self, path: Path, *, threads: int = 2) -> None:
        self.path = path
        # The registry holds requests and every log line: the user's alone (0700 folder, 0600
        # files). sqlite gives its -wal and -shm files the database file's mode, so creating
        # that one 0600 first is enough; files from an older j2c are tightened here.
        private_dir(path.parent)
        private_file(path)
        for suffix in ("-wal", "-shm", "-journal"):
            tighten_file(f"{path}{suffix}")
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="j2c-registry")
        migrate(self.conn())

    def conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self.path)
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, partial(fn, *args))

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
