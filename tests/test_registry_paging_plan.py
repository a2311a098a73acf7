"""The registry's big reads are index range reads, whatever its size: a page of ``GET /jobs``
(with and without a cursor) walks ``jobs_by_created`` with no sort of its own, and the first
page of a job's events walks the events' primary key. Asked of SQLite's query planner."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from j2c_server.registry.event_log import _READ_ROWS
from j2c_server.registry.job_registry import REGISTRY_FILE, Registry


def _plan(conn: sqlite3.Connection, sql: str, params: tuple[object, ...]) -> str:
    return " | ".join(row[-1] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params))


def test_pages_and_replays_are_index_range_reads(tmp_path: Path) -> None:
    Registry(tmp_path / REGISTRY_FILE).close()
    conn = sqlite3.connect(tmp_path / REGISTRY_FILE)
    first = _plan(
        conn, "SELECT record, last_seq FROM jobs ORDER BY created_at DESC, id DESC LIMIT ?", (10,)
    )
    after = _plan(
        conn,
        "SELECT record, last_seq FROM jobs WHERE (created_at, id) < (?, ?) "
        "ORDER BY created_at DESC, id DESC LIMIT ?",
        (1.0, "x", 10),
    )
    for plan in (first, after):
        assert "jobs_by_created" in plan, plan
        assert "TEMP B-TREE" not in plan, plan
    assert "SEARCH" in after, after
    # The events' read: the row holding the first event wanted, then the rows from it on.
    replay = _plan(conn, _READ_ROWS, ("x", 1, 1000))
    assert replay.count("SEARCH events USING PRIMARY KEY") == 2, replay
    assert "SCAN" not in replay and "TEMP B-TREE" not in replay, replay
