"""Reading usage records back from a store and aggregating them: what ``j2c usage`` prints.

Only the days in the window are listed (``usage/YYYY/MM/DD/``), concurrently; a record that
does not parse (another version's, a stray file) is counted as skipped, never fatal. A group's
numbers: jobs, failures (failed or lost), cancelled, jobs still running (a start record alone),
GPU-hours (GPUs asked x run time) and the median queue wait (submitted → running).
"""

from __future__ import annotations

import asyncio
import calendar
import re
import statistics
import time
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ValidationError

from j2c_server.core.errors import InvalidInput
from j2c_server.core.units import duration
from j2c_server.storage.base import ObjectStore
from j2c_server.usage.records import RECORD_ADAPTER, USAGE_PREFIX, StartRecord, UsageRecord
from j2c_server.wire.api import JobStatus

GroupBy = Literal["user", "image", "scheduler", "day"]
GROUPS: tuple[GroupBy, ...] = ("user", "image", "scheduler", "day")
READ_CONCURRENCY = 16
_SPAN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_since(text: str) -> float:
    """``7d``, ``12h``, ``30m``, ``2w``, ``90s`` → seconds; anything else names the option."""
    match = _SPAN.match(text)
    if not match:
        raise InvalidInput(
            f"--since: {text!r} is not a time span like 7d, 12h, 30m or 2w", field="since"
        )
    return float(match[1]) * _UNIT_S[match[2]]


class Loaded(BaseModel):
    records: list[StartRecord | UsageRecord]
    skipped: int = 0


def _day_prefixes(since_s: float, now: float) -> list[str]:
    first = time.gmtime(now - since_s)
    day = calendar.timegm((first.tm_year, first.tm_mon, first.tm_mday, 12, 0, 0))
    prefixes: list[str] = []
    while day <= now + 86400:
        prefixes.append(f"{USAGE_PREFIX}/{time.strftime('%Y/%m/%d', time.gmtime(day))}/")
        day += 86400
    return sorted(set(prefixes))


async def load_records(store: ObjectStore, since_s: float, *, now: float | None = None) -> Loaded:
    """Every record of a job created in the last ``since_s`` seconds."""
    now = time.time() if now is None else now
    listed = await asyncio.gather(*(store.list(p) for p in _day_prefixes(since_s, now)))
    keys = sorted({key for keys in listed for key in keys if key.endswith(".json")})
    slots = asyncio.Semaphore(READ_CONCURRENCY)

    async def read(key: str) -> StartRecord | UsageRecord | None:
        async with slots:
            data = await store.get_bytes(key)
        try:
            return RECORD_ADAPTER.validate_json(data)
        except ValidationError:
            return None

    found = await asyncio.gather(*(read(key) for key in keys))
    kept = [r for r in found if r is not None and r.created_at >= now - since_s]
    return Loaded(records=kept, skipped=sum(r is None for r in found))


class UsageGroup(BaseModel):
    """One row of ``j2c usage``."""

    group: str
    jobs: int
    failed: int
    cancelled: int
    running: int
    gpu_hours: float
    median_queue_wait_s: float | None


def group_of(record: StartRecord | UsageRecord, by: GroupBy) -> str:
    if by == "day":
        return time.strftime("%Y-%m-%d", time.gmtime(record.created_at))
    value = {"user": record.user, "image": record.image, "scheduler": record.scheduler}[by]
    return value or "(none)"


def aggregate(records: Iterable[StartRecord | UsageRecord], by: GroupBy) -> list[UsageGroup]:
    """One row per group, sorted by GPU-hours then jobs (largest first), then name."""
    groups: dict[str, list[StartRecord | UsageRecord]] = {}
    for record in records:
        groups.setdefault(group_of(record, by), []).append(record)
    rows: list[UsageGroup] = []
    for name, members in groups.items():
        ended = [r for r in members if isinstance(r, UsageRecord)]
        waits = [r.queue_wait_s for r in ended if r.queue_wait_s is not None]
        rows.append(
            UsageGroup(
                group=name,
                jobs=len(members),
                failed=sum(r.status in (JobStatus.failed, JobStatus.lost) for r in ended),
                cancelled=sum(r.status == JobStatus.cancelled for r in ended),
                running=len(members) - len(ended),
                gpu_hours=round(sum(r.gpu_seconds for r in ended) / 3600, 3),
                median_queue_wait_s=round(statistics.median(waits), 3) if waits else None,
            )
        )
    return sorted(rows, key=lambda row: (-row.gpu_hours, -row.jobs, row.group))


def table(rows: list[UsageGroup], by: GroupBy) -> str:
    """The rows as an aligned text table, with a total line."""
    header = [by.upper(), "JOBS", "FAILED", "CANCELLED", "RUNNING", "GPU-HOURS", "MEDIAN WAIT"]
    lines = [
        [
            row.group,
            str(row.jobs),
            str(row.failed),
            str(row.cancelled),
            str(row.running),
            f"{row.gpu_hours:.2f}",
            "-" if row.median_queue_wait_s is None else duration(row.median_queue_wait_s),
        ]
        for row in rows
    ]
    total = [
        "total",
        str(sum(r.jobs for r in rows)),
        str(sum(r.failed for r in rows)),
        str(sum(r.cancelled for r in rows)),
        str(sum(r.running for r in rows)),
        f"{sum(r.gpu_hours for r in rows):.2f}",
        "",
    ]
    widths = [max(len(cells[i]) for cells in [header, *lines, total]) for i in range(len(header))]

    def render(cells: list[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = [cell.rjust(width) for cell, width in zip(cells[1:], widths[1:], strict=True)]
        return "  ".join([first, *rest]).rstrip()

    return "\n".join(render(cells) for cells in [header, *lines, total])
