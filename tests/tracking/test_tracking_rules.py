"""The rules of ``j2c_server.jobs.tracking`` that need no tracking server: which status closes a
run, what a job and a link may show of the URI, and which MLFLOW_* variables may pass."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from j2c_server.config import ConfigError, J2CSettings, load_settings
from j2c_server.jobs.fanout import EventBus
from j2c_server.jobs.journal import Journal
from j2c_server.jobs.tracking import _closing_status, _public_uri, run_url, start_run
from j2c_server.registry.job_registry import Registry
from j2c_server.schedulers.base import JobSpec
from j2c_server.sweeps.tracking import start_sweep_runs
from j2c_server.wire.api import EventKind, JobRecord, JobRequest, JobStatus
from j2c_server.wire.manifest import Manifest


@pytest.mark.parametrize(
    ("run", "job", "closed"),
    [
        ("RUNNING", JobStatus.succeeded, "FINISHED"),
        ("FINISHED", JobStatus.succeeded, None),
        ("FAILED", JobStatus.succeeded, None),  # the user's own verdict stays
        ("RUNNING", JobStatus.failed, "FAILED"),
        ("FINISHED", JobStatus.failed, "FAILED"),  # mlflow's exit hook said FINISHED
        ("KILLED", JobStatus.failed, None),
        ("RUNNING", JobStatus.cancelled, "KILLED"),
        ("FINISHED", JobStatus.lost, "FAILED"),
    ],
)
def test_the_run_is_closed_with_the_jobs_status(run: str, job: JobStatus, closed: str | None):
    assert _closing_status(run, job) == closed


def test_userinfo_never_reaches_the_job_or_the_link() -> None:
    uri = "https://alice:s3cret@mlflow.example:8443/base/"
    assert _public_uri(uri) == "https://mlflow.example:8443/base"
    assert run_url(uri, "7", "abc") == "https://mlflow.example:8443/base/#/experiments/7/runs/abc"


def test_the_lab_tracking_uri_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://lab-mlflow:5000")
    assert J2CSettings().mlflow.uri() == "http://lab-mlflow:5000"
    chosen = J2CSettings.model_validate({"mlflow": {"tracking_uri": "http://ops:5000"}})
    assert chosen.mlflow.uri() == "http://ops:5000"


@pytest.mark.parametrize(
    "name", ["MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_PASSWORD", "AWS_SECRET_ACCESS_KEY"]
)
def test_pass_env_refuses_credentials_and_other_variables(name: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(environ={}, overrides={"mlflow": {"pass_env": [name]}})
    assert "mlflow.pass_env" in str(refused.value)


@pytest.mark.asyncio
async def test_a_tracking_uri_that_is_no_http_server_is_warned_about_and_left_out(
    tmp_path: Path,
) -> None:
    """A local MLflow store (file:, sqlite:) is this machine's: a job elsewhere cannot log to
    it, so neither a job's run nor a sweep's runs are made, and the job's log says why."""
    settings = J2CSettings.model_validate({"mlflow": {"tracking_uri": "sqlite:///mlflow.db"}})
    registry = Registry(tmp_path / "registry.sqlite3")
    try:
        now = time.time()
        record = JobRecord(
            id="job-1",
            name="train.py",
            key="k1",
            status=JobStatus.pending,
            request=JobRequest(code_path="/p", call_path="/p/train.py"),
            scheduler="local",
            created_at=now,
            updated_at=now,
        )
        record, _ = await registry.jobs.create_or_attach(
            record, {"kind": EventKind.status, "status": JobStatus.pending}
        )
        journal = Journal(registry, EventBus(), record.id)
        spec = JobSpec(key="k1", job_id=record.id, name=record.name, command=["j2c-unpack"])
        # The manifest is not read on this path: the URI is refused first.
        assert await start_run(settings, journal, record, Manifest.model_construct(), spec) is spec
        assert await start_sweep_runs(settings, journal, record, []) == []
        events, _ = await registry.events.read(record.id)
        warned = [e.text for e in events if e.data.get("warning") == "tracking"]
        refused = (
            "MLflow: sqlite:///mlflow.db is not an http(s) tracking server; "
            "the job runs without tracking"
        )
        assert warned == [refused, refused]
    finally:
        registry.close()
