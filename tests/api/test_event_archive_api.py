"""Compaction as a client sees it, through a real Jupyter server: the server's own periodic task
compacts a finished job once it is older than ``registry.compact_after_hours``, and REST paging
(``GET /jobs/{id}/events``, byte for byte) and the websocket replay from any ``after`` give the
same events before and after; a running job is left alone; removing the job removes its
stored log."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from j2c_server.jobs.service import JobService
from j2c_server.registry import archive as event_archive
from j2c_server.registry.job_registry import REGISTRY_FILE
from tests.support.event_logs import make_job
from tests.support.jobs import follow

DONE, RUNNING = "20260101-000000-aaaaaa", "20260101-000001-bbbbbb"
AFTERS = [0, 1, 2, 500, 999, 1000, 1001, 1102, 1103, 1104, 5000]
LIMITS = [None, "1", "7", "1000", "10000"]
WS_AFTERS = [0, 1, 600, 1102, 1103]


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    registry = {"compact_after_hours": 1, "compact_every_minutes": 0.005}
    return {**jp_server_config, "J2CApp": {"settings_overrides": {"registry": registry}}}


async def _pages(jp_fetch: Any, job_id: str) -> dict[tuple[int, str | None], bytes]:
    pages = {}
    for after in AFTERS:
        for limit in LIMITS:
            params = {"after": str(after)} | ({"limit": limit} if limit else {})
            response = await jp_fetch("j2c", "api", "jobs", job_id, "events", params=params)
            pages[after, limit] = response.body
    return pages


async def _replays(jp_ws_fetch: Any, job_id: str) -> dict[int, list[str]]:
    return {
        after: [
            e.model_dump_json(exclude_defaults=True)
            for e in await follow(jp_ws_fetch, job_id, after=after)
        ]
        for after in WS_AFTERS
    }


_EVENTS = "SELECT coalesce(sum(span), 0) FROM events WHERE job_id = ?"  # rows hold span events


def _column(data: Path, sql: str, *args: Any) -> Any:
    with sqlite3.connect(data / REGISTRY_FILE) as conn:
        return conn.execute(sql, args).fetchone()[0]


async def test_rest_pages_and_websocket_replay_unchanged_by_compaction(
    jp_fetch: Any, jp_ws_fetch: Any, jp_serverapp: Any, j2c_data_dir: Path
) -> None:
    # What the server does once its loop runs (pytest-jupyter leaves it out): the extension
    # starts its services, the compactor among them.
    await jp_serverapp.extension_manager.start_all_extensions()
    service: JobService = jp_serverapp.web_app.settings["j2c_service"]
    await make_job(service.registry, DONE, 1100)  # 1103 events
    await make_job(service.registry, RUNNING, 30, finish=False, lease_to="someone-else")
    pages = await _pages(jp_fetch, DONE)
    replays = await _replays(jp_ws_fetch, DONE)
    assert len(replays[0]) == 1103 and replays[1103] == []
    running = await _pages(jp_fetch, RUNNING)
    # Not yet an hour old: the server's rounds (every 0.3 s) leave both jobs alone.
    await asyncio.sleep(1.0)
    assert _column(j2c_data_dir, _EVENTS, DONE) == 1103

    # Both ended (or last changed) two hours ago now: the finished one is compacted.
    with sqlite3.connect(j2c_data_dir / REGISTRY_FILE) as conn:
        conn.execute("UPDATE jobs SET updated_at = updated_at - 7200")
    for _ in range(200):
        if _column(j2c_data_dir, "SELECT archived_seq FROM jobs WHERE id = ?", DONE):
            break
        await asyncio.sleep(0.05)
    assert _column(j2c_data_dir, "SELECT archived_seq FROM jobs WHERE id = ?", DONE) == 1103
    assert _column(j2c_data_dir, _EVENTS, DONE) == 0
    assert _column(j2c_data_dir, _EVENTS, RUNNING) == 32
    assert not event_archive.archive_path(j2c_data_dir, RUNNING).exists()

    assert await _pages(jp_fetch, DONE) == pages
    assert await _replays(jp_ws_fetch, DONE) == replays
    assert await _pages(jp_fetch, RUNNING) == running

    await jp_fetch("j2c", "api", "jobs", DONE, method="DELETE")
    assert not event_archive.archive_path(j2c_data_dir, DONE).exists()
