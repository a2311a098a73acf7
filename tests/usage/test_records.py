"""Usage records written for real jobs: succeeded, failed and cancelled, on the local backend
and a real Slurm, into the ``file://`` store and a moto S3 bucket (server mode); a store that
refuses them does not fail the job; ``usage.enabled: false`` writes none. Every record is
checked for the secret-looking values of the request's and the server's environment, and for
the server's root path."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import j2c_server
from j2c_server.usage.records import usage_key
from j2c_server.wire.api import JobRecord, JobStatus
from tests.support.jobs import follow, log_lines, submit
from tests.support.s3 import S3Target
from tests.usage.conftest import REQUEST_SECRET, SERVER_SECRET, jupyter_user, wait_for_end_record

SECRET_ENV = {"HF_TOKEN": "", "DATA_MODE": REQUEST_SECRET}
ALL_STAGES = {"scan", "pack", "upload", "configure", "submit", "watch", "results"}


def _file_reader(store: Path, record: JobRecord) -> Any:
    path = store / usage_key(record.id, record.created_at)

    async def read() -> dict[str, Any] | None:
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None
        return {**json.loads(text), "_raw": text}

    return read


def _s3_reader(bucket: S3Target, record: JobRecord) -> Any:
    client = bucket.client()
    key = bucket.key(usage_key(record.id, record.created_at))

    async def read() -> dict[str, Any] | None:
        try:
            body = await asyncio.to_thread(
                lambda: client.get_object(Bucket=bucket.bucket, Key=key)["Body"].read()
            )
        except client.exceptions.NoSuchKey:
            return None
        text = body.decode()
        return {**json.loads(text), "_raw": text}

    return read


async def _final(jp_fetch: Any, job_id: str) -> JobRecord:
    return JobRecord.model_validate_json((await jp_fetch("j2c", "api", "jobs", job_id)).body)


def _no_secrets(usage: dict[str, Any], root: Path) -> None:
    raw = usage["_raw"]
    for leaked in (SERVER_SECRET, REQUEST_SECRET, "HF_TOKEN", "DATA_MODE", str(root)):
        assert leaked not in raw, f"{leaked!r} is in the usage record"


def _common(usage: dict[str, Any], job: JobRecord, user: str, scheduler: str) -> None:
    assert usage["format_version"] == 1
    assert usage["job_id"] == job.id
    assert usage["user"] == user
    assert usage["frontend"] == "rest"
    assert usage["project"] == "proj"
    assert usage["entry"] == "train.py"
    assert usage["scheduler"] == scheduler
    assert usage["j2c_version"] == j2c_server.__version__
    assert usage["status"] == job.status.value
    assert usage["created_at"] == job.created_at


def _ran(usage: dict[str, Any], job: JobRecord) -> None:
    """A job that was submitted and ran: its handle, stages, bytes and times."""
    assert job.handle is not None
    assert usage["scheduler_job_id"] == job.handle.id
    assert set(usage["stages"]) == ALL_STAGES
    layers = job.stages["pack"].output["layers"]
    assert usage["bytes_packed"] == sum(x["size"] for x in layers if not x["reused"])
    assert usage["bytes_reused"] == sum(x["size"] for x in layers if x["reused"])
    assert usage["bytes_packed"] + usage["bytes_reused"] > 0
    assert usage["bytes_uploaded"] == job.stages["upload"].output["bytes_uploaded"]
    assert usage["submitted_at"] <= usage["started_at"] <= usage["finished_at"]
    assert usage["queue_wait_s"] == pytest.approx(
        usage["started_at"] - usage["submitted_at"], abs=1e-3
    )
    assert usage["run_s"] == pytest.approx(usage["finished_at"] - usage["started_at"], abs=1e-3)
    assert usage["gpu_seconds"] == 0  # no GPUs asked


# ---------------------------------------------------------------------- local, file://


async def test_a_succeeded_local_job_leaves_its_record_in_the_file_store(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path, j2c_data_dir: Path, jp_root_dir: Path
) -> None:
    user = await jupyter_user(jp_fetch)
    record = await submit(jp_fetch, env=SECRET_ENV, args=["--lines", "2"])
    await follow(jp_ws_fetch, record.id)
    job = await _final(jp_fetch, record.id)
    assert job.status == JobStatus.succeeded
    usage = await wait_for_end_record(_file_reader(j2c_data_dir / "store", job), job.id)
    _common(usage, job, user, "local")
    _ran(usage, job)
    assert usage["bytes_uploaded"] > 0  # the project's first send
    assert usage["exit_code"] == 0
    assert "failed_stage" not in usage
    _no_secrets(usage, jp_root_dir)
    day = time.strftime("%Y/%m/%d", time.gmtime(job.created_at))
    assert (j2c_data_dir / "store" / "usage" / day / f"{job.id}.json").is_file()


async def test_a_failed_local_job_records_its_exit_code(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path, j2c_data_dir: Path, jp_root_dir: Path
) -> None:
    user = await jupyter_user(jp_fetch)
    record = await submit(jp_fetch, env=SECRET_ENV, args=["--lines", "1", "--exit", "3"])
    await follow(jp_ws_fetch, record.id)
    job = await _final(jp_fetch, record.id)
    assert job.status == JobStatus.failed
    usage = await wait_for_end_record(_file_reader(j2c_data_dir / "store", job), job.id)
    _common(usage, job, user, "local")
    _ran(usage, job)
    assert usage["exit_code"] == 3
    _no_secrets(usage, jp_root_dir)


async def test_a_cancelled_local_job_is_recorded_as_cancelled(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path, j2c_data_dir: Path, jp_root_dir: Path
) -> None:
    user = await jupyter_user(jp_fetch)
    record = await submit(jp_fetch, env=SECRET_ENV, args=["--lines", "1000", "--sleep", "0.1"])
    seen = await follow(jp_ws_fetch, record.id, stop_after=1)
    while not any(line.startswith("pid ") for line in log_lines(seen)):
        seen += await follow(jp_ws_fetch, record.id, after=seen[-1].seq, stop_after=1)
    await jp_fetch("j2c", "api", "jobs", record.id, "cancel", method="POST", body="")
    await follow(jp_ws_fetch, record.id, after=seen[-1].seq)
    job = await _final(jp_fetch, record.id)
    assert job.status == JobStatus.cancelled
    usage = await wait_for_end_record(_file_reader(j2c_data_dir / "store", job), job.id)
    _common(usage, job, user, "local")
    assert usage["scheduler_job_id"] == job.handle.id if job.handle else False
    assert usage["run_s"] > 0
    _no_secrets(usage, jp_root_dir)


async def test_a_job_cancelled_before_submission_has_an_end_record_without_a_start(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path, j2c_data_dir: Path
) -> None:
    record = await submit(jp_fetch)
    await jp_fetch("j2c", "api", "jobs", record.id, "cancel", method="POST", body="")
    await follow(jp_ws_fetch, record.id)
    job = await _final(jp_fetch, record.id)
    assert job.status == JobStatus.cancelled
    usage = await wait_for_end_record(_file_reader(j2c_data_dir / "store", job), job.id)
    assert usage["status"] == "cancelled"
    assert "scheduler_job_id" not in usage and "started_at" not in usage
    assert usage["run_s"] == 0 and usage["gpu_seconds"] == 0


# ---------------------------------------------------------------------- local, S3 (moto)


@pytest.mark.store("s3")
async def test_records_go_to_the_s3_store_and_j2c_usage_reads_them_back(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path, s3_bucket: S3Target, jp_root_dir: Path
) -> None:
    user = await jupyter_user(jp_fetch)
    done = await submit(jp_fetch, env=SECRET_ENV, args=["--lines", "1"])
    failed = await submit(jp_fetch, env=SECRET_ENV, args=["--lines", "1", "--exit", "2"])
    for record in (done, failed):
        await follow(jp_ws_fetch, record.id)
    jobs = [await _final(jp_fetch, record.id) for record in (done, failed)]
    assert [job.status for job in jobs] == [JobStatus.succeeded, JobStatus.failed]
    for job in jobs:
        usage = await wait_for_end_record(_s3_reader(s3_bucket, job), job.id)
        _common(usage, job, user, "local")
        _ran(usage, job)
        _no_secrets(usage, jp_root_dir)

    env = {
        **os.environ,
        "J2C_STORAGE__ENDPOINT_URL": s3_bucket.endpoint,
        "J2C_STORAGE__ADDRESSING_STYLE": "path",
        "J2C_STORAGE__REGION": "us-east-1",
    }
    shown = await asyncio.to_thread(
        subprocess.run,
        [str(Path(sys.executable).parent / "j2c"), "usage", "--store", s3_bucket.url, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    groups = json.loads(shown.stdout)["groups"]
    assert [(g["group"], g["jobs"], g["failed"]) for g in groups] == [(user, 2, 1)]


# ---------------------------------------------------------------------- failures to write


@pytest.mark.store("broken")
async def test_a_store_that_refuses_the_record_does_not_fail_the_job(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path, server_log: list[str]
) -> None:
    before = await _metric(jp_fetch, "j2c_usage_record_failures_total", {})
    record = await submit(jp_fetch, args=["--lines", "1"])
    await follow(jp_ws_fetch, record.id)
    assert (await _final(jp_fetch, record.id)).status == JobStatus.succeeded
    deadline = time.monotonic() + 30
    while not any(f"usage record of job {record.id} not written" in m for m in server_log):
        assert time.monotonic() < deadline, server_log
        await asyncio.sleep(0.2)
    # The start record and the end record: each tried, reported, counted.
    while await _metric(jp_fetch, "j2c_usage_record_failures_total", {}) < before + 2:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.2)


@pytest.mark.store("file", settings={"usage": {"enabled": False}})
async def test_usage_enabled_false_writes_no_record(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path, j2c_data_dir: Path
) -> None:
    labels = {"scheduler": "local", "status": "succeeded"}
    before = await _metric(jp_fetch, "j2c_jobs_finished_total", labels)
    record = await submit(jp_fetch, args=["--lines", "1"])
    await follow(jp_ws_fetch, record.id)
    deadline = time.monotonic() + 30
    while await _metric(jp_fetch, "j2c_jobs_finished_total", labels) < before + 1:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
    await asyncio.sleep(1.0)  # where the record would have been written by now
    assert not (j2c_data_dir / "store" / "usage").exists()


async def _metric(jp_fetch: Any, name: str, labels: dict[str, str]) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    text = (await jp_fetch("metrics")).body.decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    )


# ---------------------------------------------------------------------- Slurm (real)


@pytest.mark.slurm
@pytest.mark.store("slurm")
async def test_slurm_jobs_that_succeed_fail_and_are_cancelled_leave_records(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path, j2c_data_dir: Path, jp_root_dir: Path
) -> None:
    user = await jupyter_user(jp_fetch)
    fields: dict[str, Any] = {"scheduler": "slurm", "env": SECRET_ENV}
    done = await submit(jp_fetch, args=["--lines", "1"], **fields)
    failed = await submit(jp_fetch, args=["--lines", "1", "--exit", "4"], **fields)
    long = await submit(jp_fetch, args=["--lines", "1000", "--sleep", "0.1"], **fields)
    for record in (done, failed):
        await follow(jp_ws_fetch, record.id)
    seen = await follow(jp_ws_fetch, long.id, stop_after=1)
    while not any(line.startswith("pid ") for line in log_lines(seen)):
        seen += await follow(jp_ws_fetch, long.id, after=seen[-1].seq, stop_after=1)
    await jp_fetch("j2c", "api", "jobs", long.id, "cancel", method="POST", body="")
    await follow(jp_ws_fetch, long.id, after=seen[-1].seq)

    expected = [(done, "succeeded", 0), (failed, "failed", 4), (long, "cancelled", None)]
    for record, status, exit_code in expected:
        job = await _final(jp_fetch, record.id)
        assert job.status.value == status, job.message
        usage = await wait_for_end_record(_file_reader(j2c_data_dir / "store", job), job.id)
        _common(usage, job, user, "slurm")
        assert job.handle is not None
        assert usage["scheduler_job_id"] == job.handle.id
        if exit_code is not None:
            _ran(usage, job)
            assert usage["exit_code"] == exit_code
        _no_secrets(usage, jp_root_dir)
