"""Pages of the job list, newest first, for a registry that has grown to thousands of jobs.

``GET /jobs?limit=N&before=CURSOR`` answers at most ``limit`` jobs (default
:data:`DEFAULT_JOBS_LIMIT`, at most :data:`MAX_JOBS_LIMIT`) created before the cursor; the
cursor of the next page is the last job's (created_at, id), handed to clients in a
``Link: <...>; rel="next"`` header. A cursor is the job's creation time and id, not just its id,
so a page goes on even when the job it names was removed in between. The order (created_at,
id), both descending, is the index ``jobs_by_created`` (a registry migration), so a page costs
one index range read of ``limit`` rows, whatever the registry's size.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Final

from j2c_server.core.errors import InvalidInput
from j2c_server.wire.api import JobRecord

DEFAULT_JOBS_LIMIT: Final = 200
MAX_JOBS_LIMIT: Final = 1000
# ``<created_at as Python's repr of the float>~<job id>``: repr round-trips a float exactly.
_CURSOR = re.compile(r"(?P<at>\d{1,12}(?:\.\d{1,20})?(?:e[+-]?\d{1,3})?)~(?P<id>[\w.-]{1,128})")


@dataclass(frozen=True)
class Cursor:
    """Where a page ends: jobs strictly older than this (created_at, id) come next."""

    created_at: float
    job_id: str

    def __str__(self) -> str:
        return f"{self.created_at!r}~{self.job_id}"


def parse_cursor(raw: str | None) -> Cursor | None:
    """The ``before`` query parameter; a 400 naming it when it is not a cursor."""
    if raw is None:
        return None
    match = _CURSOR.fullmatch(raw)
    if match is None:
        shown = raw if len(raw) <= 40 else raw[:40] + "..."
        raise InvalidInput(
            f"before: not a page cursor: {shown!r} (use the next page's link of the previous "
            "answer)",
            field="before",
        )
    return Cursor(float(match["at"]), match["id"])


@dataclass(frozen=True)
class Page:
    """One page as the wire carries it: each job's ``JobRecord`` JSON, and the cursor of the
    next page (``None`` when this page is the last)."""

    records: list[str]
    next: Cursor | None


class _RecordJson:
    """Stored record text and last seq → the ``JobRecord`` JSON the wire carries, for the most
    recently read :data:`CACHED_RECORDS` jobs. A job's list entry is validated and dumped once
    while it does not change (a finished job: never again); a change changes its stored text or
    last seq, so it is never served stale. Bounded: about 2 x 2 KiB per entry."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._entries: OrderedDict[tuple[str, int], str] = OrderedDict()
        self._lock = threading.Lock()  # the registry's threads read pages in parallel

    def get(self, stored: str, last_seq: int) -> str:
        key = (stored, last_seq)
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                return found
        record = JobRecord.model_validate_json(stored)
        record.last_seq = last_seq
        dumped = record.model_dump_json()
        with self._lock:
            self._entries[key] = dumped
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)
        return dumped


CACHED_RECORDS: Final = 2 * MAX_JOBS_LIMIT
_records = _RecordJson(CACHED_RECORDS)


def read_page(conn: sqlite3.Connection, limit: int, before: Cursor | None) -> Page:
    """At most ``limit`` jobs, newest first, created before ``before`` (all when ``None``)."""
    columns = "SELECT record, last_seq, created_at, id FROM jobs"
    order = "ORDER BY created_at DESC, id DESC LIMIT ?"
    if before is None:
        rows = conn.execute(f"{columns} {order}", (limit,)).fetchall()
    else:
        # The row-value comparison is what lets SQLite range-scan the (created_at, id) index.
        rows = conn.execute(
            f"{columns} WHERE (created_at, id) < (?, ?) {order}",
            (before.created_at, before.job_id, limit),
        ).fetchall()
    records = [_records.get(stored, last_seq) for stored, last_seq, _, _ in rows]
    full = len(rows) == limit
    return Page(records, Cursor(rows[-1][2], rows[-1][3]) if full and rows else None)
