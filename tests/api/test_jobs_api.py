"""Jobs through the real server: REST to submit and inspect, the websocket to follow live.

Every job runs for real: packed from a project under the server's root, uploaded to the
embedded ``file://`` store and run by the local scheduler through ``j2c-unpack``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psutil
import pytest
from tornado.httpclient import HTTPClientError

from j2c_server.wire.api import Event, EventKind, JobRecord, JobStatus
from tests.support.jobs import final_status, follow, log_lines, submit


def _expected(lines: int) -> list[str]:
    return [f"line {i}" for i in range(lines)]


async def test_job_runs_to_success_with_every_line_once_in_order(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path
) -> None:
    record = await submit(jp_fetch, args=["--lines", "30"])
    events = await follow(jp_ws_fetch, record.id)
    assert log_lines(events)[1:] == _expected(30)
    assert final_status(events) == JobStatus.succeeded
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


async def test_finished_job_records_exit_code_and_outputs(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path
) -> None:
    record = await submit(jp_fetch)
    await follow(jp_ws_fetch, record.id)
    done = JobRecord.model_validate_json((await jp_fetch("j2c", "api", "jobs", record.id)).body)
    assert done.status == JobStatus.succeeded
    assert done.exit_code == 0
    assert done.results is not None
    assert [a.name for a in done.results.artifacts] == ["result.txt"]


async def test_submit_returns_at_once_with_a_pending_job(jp_fetch: Any, project: Path) -> None:
    record = await submit(jp_fetch)
    assert record.status == JobStatus.pending
    assert record.request.code_path == str(project.resolve())


async def test_reconnect_with_last_seq_gets_every_later_event_once(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path
) -> None:
    record = await submit(jp_fetch, args=["--lines", "40", "--sleep", "0.02"])
    first = await follow(jp_ws_fetch, record.id, stop_after=12)
    rest = await follow(jp_ws_fetch, record.id, after=first[-1].seq)
    events = first + rest
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert log_lines(events)[1:] == _expected(40)
    assert final_status(events) == JobStatus.succeeded


async def test_job_goes_on_when_the_browser_closes(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path
) -> None:
    record = await submit(jp_fetch, args=["--lines", "5", "--sleep", "0.1"])
    await follow(jp_ws_fetch, record.id, stop_after=2)
    events = await follow(jp_ws_fetch, record.id)  # a new tab, from the start
    assert final_status(events) == JobStatus.succeeded
    assert log_lines(events)[1:] == _expected(5)


async def test_events_route_lists_events_after_n(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path
) -> None:
    record = await submit(jp_fetch)
    streamed = await follow(jp_ws_fetch, record.id)
    response = await jp_fetch("j2c", "api", "jobs", record.id, "events", params={"after": "3"})
    listed = [Event.model_validate(e) for e in json.loads(response.body)]
    assert [e.seq for e in listed] == [e.seq for e in streamed[3:]]


async def test_cancel_stops_a_long_job_and_its_process(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path
) -> None:
    record = await submit(jp_fetch, args=["--lines", "1000", "--sleep", "0.1"])
    started = await follow(jp_ws_fetch, record.id, stop_after=1)
    while not any(line.startswith("pid ") for line in log_lines(started)):
        started += await follow(jp_ws_fetch, record.id, after=started[-1].seq, stop_after=1)
    pid = int(next(line for line in log_lines(started) if line.startswith("pid "))[4:])

    response = await jp_fetch("j2c", "api", "jobs", record.id, "cancel", method="POST", body="")
    assert JobRecord.model_validate_json(response.body).status == JobStatus.cancelling
    events = await follow(jp_ws_fetch, record.id, after=started[-1].seq)
    assert final_status(events) == JobStatus.cancelled
    assert not _alive(pid)


async def test_cancel_before_submission_stops_the_pipeline(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path
) -> None:
    record = await submit(jp_fetch)
    await jp_fetch("j2c", "api", "jobs", record.id, "cancel", method="POST", body="")
    events = await follow(jp_ws_fetch, record.id)
    assert final_status(events) == JobStatus.cancelled


async def test_failing_script_fails_with_its_exit_code_and_last_lines(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path
) -> None:
    record = await submit(jp_fetch, args=["--lines", "3", "--exit", "3"])
    events = await follow(jp_ws_fetch, record.id)
    assert final_status(events) == JobStatus.failed
    result = next(e for e in events if e.kind == EventKind.result)
    assert result.data["exit_code"] == 3
    assert "failing with 3" in result.data["last_lines"]
    done = JobRecord.model_validate_json((await jp_fetch("j2c", "api", "jobs", record.id)).body)
    assert done.exit_code == 3


async def test_identical_request_attaches_to_the_running_job(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path
) -> None:
    first = await submit(jp_fetch, args=["--lines", "3", "--sleep", "0.2"])
    second = await submit(jp_fetch, args=["--lines", "3", "--sleep", "0.2"])
    assert second.id == first.id
    await follow(jp_ws_fetch, first.id)


async def test_jobs_are_listed_newest_first(jp_fetch: Any, jp_ws_fetch: Any, project: Path) -> None:
    first = await submit(jp_fetch, args=["--lines", "1"])
    second = await submit(jp_fetch, args=["--lines", "2"])
    listed = json.loads((await jp_fetch("j2c", "api", "jobs")).body)
    assert [job["id"] for job in listed] == [second.id, first.id]
    for job in (first, second):
        await follow(jp_ws_fetch, job.id)


async def test_removing_a_finished_job_forgets_it(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path
) -> None:
    record = await submit(jp_fetch, args=["--lines", "1"])
    await follow(jp_ws_fetch, record.id)
    response = await jp_fetch("j2c", "api", "jobs", record.id, method="DELETE")
    assert response.code == 204
    with pytest.raises(HTTPClientError) as missing:
        await jp_fetch("j2c", "api", "jobs", record.id)
    assert missing.value.code == 404


async def test_removing_a_running_job_is_a_conflict(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path
) -> None:
    record = await submit(jp_fetch, args=["--lines", "3", "--sleep", "0.2"])
    with pytest.raises(HTTPClientError) as refused:
        await jp_fetch("j2c", "api", "jobs", record.id, method="DELETE")
    assert refused.value.code == 409
    assert json.loads(refused.value.response.body)["field"] == "job_id"
    await follow(jp_ws_fetch, record.id)


async def test_stream_of_an_unknown_job_is_refused_before_upgrade(jp_ws_fetch: Any) -> None:
    with pytest.raises(HTTPClientError) as missing:
        await jp_ws_fetch("j2c", "api", "jobs", "no-such-job", "stream")
    assert missing.value.code == 404


async def test_no_credential_reaches_the_api_or_the_job_spec(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "very-secret-value")
    record = await submit(jp_fetch)
    await follow(jp_ws_fetch, record.id)
    for path in ((record.id,), (record.id, "events")):
        body = (await jp_fetch("j2c", "api", "jobs", *path)).body
        assert b"very-secret-value" not in body
    spec = (
        JobRecord.model_validate_json((await jp_fetch("j2c", "api", "jobs", record.id)).body)
        .stages["configure"]
        .output["spec"]
    )
    assert "AWS_SECRET_ACCESS_KEY" not in spec["env"]
    assert spec["env"]["J2C_JOB_ID"] == record.id


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting to be reaped counts as gone)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
