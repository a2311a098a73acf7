"""``GET /j2c/api/jobs/{id}/sweep`` through the real server: what a job that is no sweep's
parent, or no job at all, answers (the one error mapping: 404 with the reason)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from tests.support.jobs import follow, submit


async def test_the_sweep_of_an_unknown_job_is_not_found(jp_fetch: Any) -> None:
    with pytest.raises(HTTPClientError) as missing:
        await jp_fetch("j2c", "api", "jobs", "no-such-job", "sweep")
    assert missing.value.code == 404


async def test_a_plain_job_has_no_sweep_view(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path
) -> None:
    record = await submit(jp_fetch, args=["--lines", "1"])
    await follow(jp_ws_fetch, record.id)
    with pytest.raises(HTTPClientError) as refused:
        await jp_fetch("j2c", "api", "jobs", record.id, "sweep")
    assert refused.value.code == 404
    body = json.loads(refused.value.response.body)
    assert f"job {record.id} is not a sweep" in body["message"]
