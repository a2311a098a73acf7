"""How the registry's async API reaches SQLite: a small thread pool, one connection per thread.

sqlite calls block, so every :class:`~.job_registry.Registry` method runs its statements in a
pool thread (:meth:`RegistryConnections._call`) and the server's event loop never waits on the
disk; each thread keeps its own connection (:func:`.db.connect`). Opening the file makes it the
user's alone and brings its schema up to date (:func:`.db.migrate`). A long-running process (the
server) also copies the WAL back into the file every second from its pool
(:meth:`RegistryConnections.start_checkpoints`), so that a commit rarely does it: SQLite's own
checkpoint runs inside the commit that crosses its threshold, and with its fsyncs on a loaded
machine it held the group commit of every job's lines for up to 1.7 s. The query mixins
(:mod:`.jobs_table`, :mod:`.event_log`, :mod:`.leases`, :mod:`.accounting`) build on this class.
"""

from __future__ import annotations

import asyncio
import contextlib
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
CHECKPOINT_EVERY_S = 1.0
# With the checkpoints above, a commit checkpoints only past this many WAL pages (SQLite's
# default, 1000, is what every other process keeps).
BACKGROUND_WAL_PAGES = 10_000


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
        self._wal_pages: int | None = None  # None: SQLite's autocheckpoint
        self._checkpoints: asyncio.Task[None] | None = None
        migrate(self._conn())

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self.path)
            self._local.conn = conn
            self._local.wal_pages = None
            with self._lock:
                self._connections.append(conn)
        if self._local.wal_pages != self._wal_pages:
            conn.execute(f"PRAGMA wal_autocheckpoint = {self._wal_pages}")
            self._local.wal_pages = self._wal_pages
        return conn

    def start_checkpoints(self) -> None:
        """From now on, checkpoint the WAL every :data:`CHECKPOINT_EVERY_S` off the commits
        (``PASSIVE``: never waits for, nor blocks, a reader or a writer)."""
        if self._checkpoints is None:
            self._wal_pages = BACKGROUND_WAL_PAGES
            loop = asyncio.get_running_loop()
            self._checkpoints = loop.create_task(self._checkpoint_every(), name="j2c-checkpoint")

    async def _checkpoint_every(self) -> None:
        while True:
            await asyncio.sleep(CHECKPOINT_EVERY_S)
            with contextlib.suppress(sqlite3.Error):  # busy or locked: the next one
                await self._call(self._checkpoint)

    def _checkpoint(self) -> None:
        self._conn().execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, partial(fn, *args))

    def close(self) -> None:
        if self._checkpoints is not None:
            self._checkpoints.cancel()
        self._pool.shutdown(wait=True)
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
