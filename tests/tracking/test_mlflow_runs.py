"""A job's MLflow run, against a real MLflow tracking server (``mlflow server``, SQLite
backend store, artifacts on moto S3; ``tests/tracking/mlflow_server.py``).

Jobs run for real through the Jupyter server (local scheduler, real ``j2c-unpack``); the user's
code calls ``mlflow.start_run()`` / ``log_metric()`` / ``log_text()`` as it would anywhere, and
lands in the run j2c created for it.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from j2c_server.wire.api import JobRecord, JobStatus, LineLevel, LineOrigin
from tests.support.jobs import follow, settle, submit
from tests.tracking.mlflow_server import MlflowServer

TOKEN = "mlflow-token-of-the-server-never-the-jobs"
LOG_TO_MLFLOW = """\
import os, sys
import mlflow

run = mlflow.start_run()  # MLFLOW_RUN_ID: the run j2c made
mlflow.log_metric("val_loss", 0.5, step=0)
mlflow.log_metric("val_loss", 0.25, step=1)
mlflow.log_text("weights", "model/weights.txt")
print("logged to", run.info.run_id, os.environ["MLFLOW_EXPERIMENT_ID"], flush=True)
sys.exit(3 if "--fail" in sys.argv else 0)
"""


@pytest.fixture
def tracking_uri() -> str:
    """Which tracking server the job gets: ``up`` (the real one), ``down`` (a closed port) or
    ``refusing`` (a path of the real one that is no MLflow API)."""
    return "up"


@pytest.fixture
def jp_server_config(
    jp_server_config: dict[str, Any], mlflow_server: MlflowServer, tracking_uri: str
) -> Any:
    uri = {
        "up": mlflow_server.url,
        "down": f"http://127.0.0.1:{_closed_port()}",
        "refusing": f"{mlflow_server.url}/not-mlflow",
    }[tracking_uri]
    overrides = {
        "mlflow": {"tracking_uri": uri, "experiment": "digits"},
        # The job's j2c-unpack runs this checkout's code.
        "scheduler": {"local": {"pass_env": ["PYTHONPATH"]}},
    }
    return {**jp_server_config, "J2CApp": {"settings_overrides": overrides}}


@pytest.fixture
def tracked_project(project: Path) -> Path:
    (project / "track.py").write_text(LOG_TO_MLFLOW)
    settle(project)
    return project


async def _run(jp_fetch: Any, jp_ws_fetch: Any, **fields: Any) -> JobRecord:
    record = await submit(jp_fetch, call_path="proj/track.py", **fields)
    await follow(jp_ws_fetch, record.id)
    return JobRecord.model_validate_json((await jp_fetch("j2c", "api", "jobs", record.id)).body)


async def test_a_job_that_logs_a_metric_lands_in_its_tagged_finished_run(
    jp_fetch: Any,
    jp_ws_fetch: Any,
    tracked_project: Path,
    mlflow_server: MlflowServer,
    j2c_data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The server's own: a location for the job (mlflow.pass_env), a token for j2c's calls only.
    monkeypatch.setenv("MLFLOW_S3_ENDPOINT_URL", "http://s3.example:9000")
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", TOKEN)
    started = time.monotonic()
    job = await _run(jp_fetch, jp_ws_fetch)
    assert job.status == JobStatus.succeeded, job.message
    assert job.results is not None and job.results.tracking is not None
    tracking = job.results.tracking
    assert tracking.error is None
    assert tracking.status == "FINISHED"
    assert tracking.metrics == {"val_loss": 0.25}  # the latest value
    assert tracking.url == (
        f"{mlflow_server.url}/#/experiments/{tracking.experiment_id}/runs/{tracking.run_id}"
    )
    run = mlflow_server.run(tracking.run_id)
    tags = {tag["key"]: tag["value"] for tag in run["data"]["tags"]}
    assert tags["j2c.job_id"] == job.id
    assert tags["j2c.project"] == "proj"
    assert tags["j2c.scheduler"] == "local"
    assert tags["j2c.code_digest"].startswith("sha256:")
    assert run["info"]["status"] == "FINISHED"
    experiment = mlflow_server.get("experiments/get-by-name", experiment_name="digits")
    assert experiment["experiment"]["experiment_id"] == tracking.experiment_id
    assert tracking.artifact_uri is not None
    keys = mlflow_server.artifact_keys()
    assert any(key.endswith(f"{tracking.run_id}/artifacts/model/weights.txt") for key in keys)
    spec = (j2c_data_dir / "runs" / job.id / "spec.json").read_text()
    env = json.loads(spec)["env"]
    assert env["MLFLOW_RUN_ID"] == tracking.run_id
    assert env["MLFLOW_EXPERIMENT_ID"] == tracking.experiment_id
    assert env["MLFLOW_TRACKING_URI"] == mlflow_server.url
    assert env["MLFLOW_S3_ENDPOINT_URL"] == "http://s3.example:9000"
    assert TOKEN not in spec and "MLFLOW_TRACKING_TOKEN" not in env
    events = [e for e in await _events(jp_fetch, job.id) if "tracking" in e.get("data", {})]
    seconds = events[0]["data"]["seconds"]
    print(f"MLflow calls before submit: {seconds:.3f} s (job {time.monotonic() - started:.1f} s)")


async def test_a_failing_job_leaves_its_run_failed(
    jp_fetch: Any, jp_ws_fetch: Any, tracked_project: Path, mlflow_server: MlflowServer
) -> None:
    job = await _run(jp_fetch, jp_ws_fetch, args=["--fail"])
    assert job.status == JobStatus.failed
    assert job.results is not None and job.results.tracking is not None
    assert job.results.tracking.status == "FAILED"
    assert job.results.tracking.metrics == {"val_loss": 0.25}
    assert mlflow_server.run(job.results.tracking.run_id)["info"]["status"] == "FAILED"


@pytest.mark.parametrize("tracking_uri", ["down", "refusing"])
async def test_a_tracking_server_down_or_refusing_warns_and_the_job_still_runs(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path, tracking_uri: str
) -> None:
    record = await submit(jp_fetch)  # train.py: no MLflow of its own
    events = await follow(jp_ws_fetch, record.id)
    job = JobRecord.model_validate_json((await jp_fetch("j2c", "api", "jobs", record.id)).body)
    assert job.status == JobStatus.succeeded, job.message
    assert job.results is not None and job.results.tracking is None
    warnings = [e for e in events if e.data.get("warning") == "tracking"]
    assert len(warnings) == 1
    text = warnings[0].text or ""
    assert (warnings[0].origin, warnings[0].level, warnings[0].phase) == (
        LineOrigin.j2c,
        LineLevel.warning,
        "tracking",
    )
    assert text.startswith("MLflow: ")
    assert ("cannot be reached" if tracking_uri == "down" else "refused") in text
    assert text.endswith("the job runs without tracking")


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # nothing listens once the socket is closed


async def _events(jp_fetch: Any, job_id: str) -> list[dict[str, Any]]:
    response = await jp_fetch("j2c", "api", "jobs", job_id, "events")
    body: list[dict[str, Any]] = json.loads(response.body)
    return body


async def test_a_job_its_scheduler_refuses_leaves_no_run_open(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path, mlflow_server: MlflowServer
) -> None:
    # More GPUs than this machine has: the local scheduler refuses it at submit.
    record = await submit(jp_fetch, resources={"gpus": 64})
    events = await follow(jp_ws_fetch, record.id)
    job = JobRecord.model_validate_json((await jp_fetch("j2c", "api", "jobs", record.id)).body)
    assert job.status == JobStatus.failed
    made = [e for e in events if "tracking" in e.data]
    assert len(made) == 1, [e.text for e in events]
    run_id = made[0].data["tracking"]["run_id"]
    assert mlflow_server.run(run_id)["info"]["status"] == "FAILED"
