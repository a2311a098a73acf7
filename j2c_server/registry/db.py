"""The registry's SQLite file: connections, write transactions and the versioned schema.

Every module of ``registry/`` that touches the file goes through :func:`connect` (WAL, a busy
timeout so a second writer waits instead of failing) and :func:`write` (one short
``BEGIN IMMEDIATE`` transaction). The schema is versioned in one place, :data:`MIGRATIONS`,
applied in order up to ``PRAGMA user_version``: the tables of the registry, the list's paging
index and the event archive's columns alike.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from j2c_server.core.errors import ConfigError

REGISTRY_FILE = "registry.sqlite3"
BUSY_TIMEOUT_MS = 10_000

# Each entry moves the schema one version up; never edit an entry once released, append one.
MIGRATIONS: list[tuple[str, ...]] = [
    (
        """CREATE TABLE jobs (
            id TEXT PRIMARY KEY,
            key TEXT NOT NULL,
            status TEXT NOT NULL,
            record TEXT NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            last_seq INTEGER NOT NULL DEFAULT 0,
            log_cursor TEXT
        )""",
        "CREATE INDEX jobs_by_key ON jobs (key, created_at)",
        "CREATE INDEX jobs_by_status ON jobs (status)",
        """CREATE TABLE events (
            job_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            event TEXT NOT NULL,
            PRIMARY KEY (job_id, seq)
        ) WITHOUT ROWID""",
        """CREATE TABLE leases (
            job_id TEXT PRIMARY KEY,
            owner TEXT NOT NULL,
            expires REAL NOT NULL
        )""",
    ),
    # pages of GET /jobs, newest first (registry/paging.py)
    ("CREATE INDEX jobs_by_created ON jobs (created_at, id)",),
    # finished jobs' events compacted into files (registry/archive.py)
    (
        "ALTER TABLE jobs ADD COLUMN archived_seq INTEGER NOT NULL DEFAULT 0",
        "CREATE INDEX jobs_to_compact ON jobs (archived_seq, updated_at)",
    ),
    # ended jobs whose usage record is written (registry/accounting.py); the jobs that ended
    # before this version count as accounted (their drivers wrote what they could)
    (
        "ALTER TABLE jobs ADD COLUMN accounted_at REAL",
        "UPDATE jobs SET accounted_at = updated_at "
        "WHERE status IN ('succeeded', 'failed', 'cancelled', 'lost')",
        "CREATE INDEX jobs_to_account ON jobs (updated_at) WHERE accounted_at IS NULL",
    ),
    # a watcher's batch of log lines stored as one row: ``span`` events numbered from ``seq``,
    # their JSON joined by newlines (registry/event_rows.py); every older row holds one event
    ("ALTER TABLE events ADD COLUMN span INTEGER NOT NULL DEFAULT 1",),
]
SCHEMA_VERSION = len(MIGRATIONS)


def connect(path: Path) -> sqlite3.Connection:
    """A connection to the registry file, safe to share with one worker thread at a time."""
    # isolation_level=None: transactions are explicit (BEGIN IMMEDIATE), never implicit.
    conn = sqlite3.connect(
        path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
    )
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    return conn


@contextmanager
def write(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One short write transaction: taken at once (no lock upgrade deadlocks), always ended."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def migrate(conn: sqlite3.Connection) -> None:
    """Bring the schema to :data:`SCHEMA_VERSION`; safe when several processes start at once."""
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    if version == SCHEMA_VERSION:
        return
    with write(conn):
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        if version > SCHEMA_VERSION:
            raise ConfigError(
                f"the job registry has schema version {version}, newer than this j2c "
                f"understands ({SCHEMA_VERSION}); upgrade j2c",
                field="data_dir",
            )
        for statements in MIGRATIONS[version:]:
            for statement in statements:
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
