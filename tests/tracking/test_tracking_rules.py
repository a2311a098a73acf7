"""The rules of ``j2c_server.jobs.tracking`` that need no tracking server: which status closes a
run, what a job and a link may show of the URI, and which MLFLOW_* variables may pass."""

from __future__ import annotations

import pytest

from j2c_server.config import ConfigError, J2CSettings, load_settings
from j2c_server.jobs.tracking import _closing_status, _public_uri, run_url
from j2c_server.wire.api import JobStatus


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
