"""``GET /jobs`` in pages through a real server: newest first, ``limit`` (default and maximum),
the ``before`` cursor of the ``Link: rel="next"`` header (which still works when the job it
names was removed), every job exactly once over the pages, and a 400 naming the parameter for
bad input. The registry holds synthetic finished jobs (written as the server writes them)."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from tornado.httpclient import HTTPClientError

from j2c_server.registry.job_registry import REGISTRY_FILE, Registry
from j2c_server.registry.paging import DEFAULT_JOBS_LIMIT, MAX_JOBS_LIMIT
from j2c_server.wire.api import JobRecord, JobRequest, JobStatus

JOBS = DEFAULT_JOBS_LIMIT + 50


def _fill(data_dir: Path, count: int) -> list[str]:
    """``count`` finished jobs, one second apart, the last two created at the same instant
    (the id breaks the tie); their ids newest first."""
    Registry(data_dir / REGISTRY_FILE).close()  # the schema
    request = JobRequest(code_path="proj", call_path="proj/train.py")
    rows = []
    for i in range(count):
        at = 1_700_000_000.0 + min(i, count - 2) + 0.25
        record = JobRecord(
            id=f"job-{i:05d}",
            name="train.py",
            key=f"key-{i}",
            status=JobStatus.succeeded,
            request=request,
            scheduler="local",
            created_at=at,
            updated_at=at,
        )
        rows.append((record.id, record.key, "succeeded", record.model_dump_json(), at, at))
    with sqlite3.connect(data_dir / REGISTRY_FILE) as conn:
        conn.executemany(
            "INSERT INTO jobs (id, key, status, record, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            rows,
        )
    return [row[0] for row in reversed(rows)]


async def _page(jp_fetch: Any, **params: str) -> tuple[list[str], str | None]:
    response = await jp_fetch("j2c", "api", "jobs", params=params)
    ids = [job["id"] for job in json.loads(response.body)]
    link = response.headers.get("Link")
    if link is None:
        return ids, None
    match = re.fullmatch(r'<([^>]+)>; rel="next"', link)
    assert match, link
    url = urlparse(match[1])
    assert url.path.endswith("/j2c/api/jobs")
    return ids, parse_qs(url.query)["before"][0]


async def test_pages_cover_every_job_once_newest_first(jp_fetch: Any, j2c_data_dir: Path) -> None:
    expected = _fill(j2c_data_dir, JOBS)
    first, before = await _page(jp_fetch)
    assert first == expected[:DEFAULT_JOBS_LIMIT]
    assert before is not None

    seen = list(first)
    pages = 1
    while before is not None:
        ids, before = await _page(jp_fetch, limit="37", before=before)
        assert len(ids) <= 37
        seen += ids
        pages += 1
    assert seen == expected
    assert pages == 1 + -(-(JOBS - DEFAULT_JOBS_LIMIT) // 37)


async def test_a_cursor_outlives_the_job_it_names(jp_fetch: Any, j2c_data_dir: Path) -> None:
    expected = _fill(j2c_data_dir, 30)
    first, before = await _page(jp_fetch, limit="10")
    assert first == expected[:10] and before is not None
    await jp_fetch("j2c", "api", "jobs", first[-1], method="DELETE")
    second, _ = await _page(jp_fetch, limit="10", before=before)
    assert second == expected[10:20]


async def test_a_short_page_has_no_next_link(jp_fetch: Any, j2c_data_dir: Path) -> None:
    expected = _fill(j2c_data_dir, 5)
    ids, before = await _page(jp_fetch, limit=str(MAX_JOBS_LIMIT))
    assert ids == expected and before is None


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": str(MAX_JOBS_LIMIT + 1)}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"before": "job-00001"}, "before"),
        ({"before": "1.5~"}, "before"),
        ({"before": "x~job"}, "before"),
    ],
)
async def test_bad_paging_input_is_a_400_naming_the_parameter(
    jp_fetch: Any, j2c_data_dir: Path, params: dict[str, str], field: str
) -> None:
    with pytest.raises(HTTPClientError) as refused:
        await jp_fetch("j2c", "api", "jobs", params=params)
    assert refused.value.code == 400
    assert refused.value.response is not None
    body = json.loads(refused.value.response.body)
    assert body["field"] == field, body
    assert body["message"].startswith(f"{field}:"), body


async def test_a_changed_job_is_never_listed_stale(jp_fetch: Any, j2c_data_dir: Path) -> None:
    """The list keeps each job's JSON while it does not change: a new status or a new event
    shows on the next page read."""
    expected = _fill(j2c_data_dir, 3)
    response = await jp_fetch("j2c", "api", "jobs")
    jobs = {job["id"]: job for job in json.loads(response.body)}
    assert jobs[expected[0]]["status"] == "succeeded" and jobs[expected[0]]["last_seq"] == 0

    with sqlite3.connect(j2c_data_dir / REGISTRY_FILE) as conn:
        (stored,) = conn.execute("SELECT record FROM jobs WHERE id = ?", (expected[0],)).fetchone()
        changed = JobRecord.model_validate_json(stored)
        changed.status = JobStatus.failed
        conn.execute(
            "UPDATE jobs SET record = ?, status = 'failed' WHERE id = ?",
            (changed.model_dump_json(), expected[0]),
        )
        conn.execute("UPDATE jobs SET last_seq = 7 WHERE id = ?", (expected[1],))
    response = await jp_fetch("j2c", "api", "jobs")
    jobs = {job["id"]: job for job in json.loads(response.body)}
    assert jobs[expected[0]]["status"] == "failed"
    assert jobs[expected[1]]["last_seq"] == 7
    assert jobs[expected[2]]["last_seq"] == 0
