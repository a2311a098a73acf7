"""The server's ``/metrics`` after real jobs (through the real Jupyter server and its own
Prometheus route), and the audit trail of every mutating action in the server's log."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from j2c_server.wire.api import JobRecord, JobStatus
from tests.support.jobs import follow, log_lines, submit
from tests.usage.conftest import HUB_USER, AuditLines, jupyter_user

Samples = list[tuple[str, dict[str, str], float]]


async def _samples(jp_fetch: Any) -> Samples:
    text = (await jp_fetch("metrics")).body.decode()
    return [
        (sample.name, dict(sample.labels), sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("j2c_")
    ]


def _value(samples: Samples, name: str, **labels: str) -> float:
    return sum(v for n, got, v in samples if n == name and labels.items() <= got.items())


async def _until(jp_fetch: Any, name: str, at_least: float, **labels: str) -> Samples:
    """The metrics once ``name`` reached ``at_least`` (the end is counted just after the
    job's last event)."""
    deadline = time.monotonic() + 30
    while True:
        samples = await _samples(jp_fetch)
        if _value(samples, name, **labels) >= at_least:
            return samples
        assert time.monotonic() < deadline, f"{name} stayed below {at_least}"
        await asyncio.sleep(0.1)


async def test_metrics_count_a_finished_job_without_user_labels(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path
) -> None:
    before = await _samples(jp_fetch)
    finished = {"scheduler": "local", "status": "succeeded"}
    record = await submit(jp_fetch, args=["--lines", "1"])
    await follow(jp_ws_fetch, record.id)
    count = _value(before, "j2c_jobs_finished_total", **finished) + 1
    after = await _until(jp_fetch, "j2c_jobs_finished_total", count, **finished)

    def grew(name: str, **labels: str) -> float:
        return _value(after, name, **labels) - _value(before, name, **labels)

    assert grew("j2c_jobs_submitted_total", scheduler="local") == 1
    assert grew("j2c_jobs_finished_total", **finished) == 1
    for stage in ("scan", "pack", "upload", "configure", "submit", "watch", "results"):
        assert grew("j2c_stage_duration_seconds_count", stage=stage) == 1
    assert grew("j2c_queue_wait_seconds_count", scheduler="local") == 1
    assert grew("j2c_layer_bytes_total", kind="uploaded") > 0
    assert grew("j2c_layer_bytes_total", kind="packed") > 0
    assert all("user" not in labels for _, labels, _ in after)
    assert _value(after, "j2c_stream_followers") == _value(before, "j2c_stream_followers")


@pytest.mark.store("file", settings={"metrics": {"user_labels": True}})
async def test_user_labels_when_the_setting_enables_them(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path
) -> None:
    record = await submit(jp_fetch, args=["--lines", "1"])
    await follow(jp_ws_fetch, record.id)
    samples = await _until(jp_fetch, "j2c_jobs_finished_total", 1, scheduler="local", user=HUB_USER)
    assert _value(samples, "j2c_jobs_submitted_total", user=HUB_USER) == 1


async def test_followers_of_a_stream_are_counted_while_they_follow(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path
) -> None:
    idle = _value(await _samples(jp_fetch), "j2c_stream_followers")
    record = await submit(jp_fetch, args=["--lines", "1000", "--sleep", "0.05"])
    ws = await jp_ws_fetch("j2c", "api", "jobs", record.id, "stream")
    await ws.read_message()
    assert _value(await _samples(jp_fetch), "j2c_stream_followers") == idle + 1
    ws.close()
    deadline = time.monotonic() + 10
    while _value(await _samples(jp_fetch), "j2c_stream_followers") != idle:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    await jp_fetch("j2c", "api", "jobs", record.id, "cancel", method="POST", body="")
    await follow(jp_ws_fetch, record.id)


async def test_every_mutating_action_is_audited_once(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path, audit_lines: AuditLines
) -> None:
    user = await jupyter_user(jp_fetch)
    done = await submit(jp_fetch, args=["--lines", "1"])
    again = await submit(jp_fetch, args=["--lines", "1"])  # the same job: attached
    await follow(jp_ws_fetch, done.id)
    long = await submit(jp_fetch, args=["--lines", "1000", "--sleep", "0.1"])
    seen = await follow(jp_ws_fetch, long.id, stop_after=1)
    while not any(line.startswith("pid ") for line in log_lines(seen)):
        seen += await follow(jp_ws_fetch, long.id, after=seen[-1].seq, stop_after=1)
    await jp_fetch("j2c", "api", "jobs", long.id, "cancel", method="POST", body="")
    await follow(jp_ws_fetch, long.id, after=seen[-1].seq)
    final = JobRecord.model_validate_json((await jp_fetch("j2c", "api", "jobs", done.id)).body)
    assert final.status == JobStatus.succeeded
    copy = ("j2c", "api", "jobs", done.id, "artifacts", "result.txt", "copy")
    await jp_fetch(*copy, method="POST", body="")
    await jp_fetch("j2c", "api", "jobs", long.id, method="DELETE")

    assert again.id == done.id
    submits = audit_lines.of("submit")
    assert [(s["job_id"], s["attached"]) for s in submits] == [
        (done.id, False),
        (done.id, True),
        (long.id, False),
    ]
    assert [line["job_id"] for line in audit_lines.of("cancel")] == [long.id]
    assert [line["artifact"] for line in audit_lines.of("copy_artifact")] == ["result.txt"]
    assert [line["job_id"] for line in audit_lines.of("remove")] == [long.id]
    assert len(audit_lines.lines) == 6
    for line in audit_lines.lines:
        assert line["user"] == user
        assert line["frontend"] == "rest"
    assert all(line["project"] == "proj" for line in submits)


async def test_a_refused_action_is_not_audited(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path, audit_lines: AuditLines
) -> None:
    from tornado.httpclient import HTTPClientError

    record = await submit(jp_fetch, args=["--lines", "200", "--sleep", "0.05"])
    with pytest.raises(HTTPClientError) as refused:  # still running: 409
        await jp_fetch("j2c", "api", "jobs", record.id, method="DELETE")
    assert refused.value.code == 409
    assert audit_lines.of("remove") == []
    await jp_fetch("j2c", "api", "jobs", record.id, "cancel", method="POST", body="")
    await follow(jp_ws_fetch, record.id)
