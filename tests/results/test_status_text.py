"""``j2c status``'s results: the artifacts, what is missing and why, and the MLflow run."""

from __future__ import annotations

import time

from j2c_server.cli.commands import describe
from j2c_server.wire.api import (
    Artifact,
    JobRecord,
    JobRequest,
    JobResults,
    JobStatus,
    OutputFailure,
    TrackingRun,
)


def _record(results: JobResults) -> JobRecord:
    now = time.time()
    return JobRecord(
        id="job-1",
        name="train.py",
        key="k",
        status=JobStatus.failed,
        request=JobRequest(code_path="/p", call_path="train.py"),
        scheduler="slurm",
        created_at=now,
        updated_at=now,
        results=results,
    )


def test_status_lists_artifacts_failures_and_the_run_with_its_metrics() -> None:
    results = JobResults(
        output_uri="s3://b/p/jobs/job-1/outputs",
        artifacts=[Artifact(name="metrics.json", size=19), Artifact(name="model/w.bin", size=7)],
        failed_outputs=[OutputFailure(name="big.bin", error="HTTP 403 AccessDenied")],
        outputs_note="1 output(s) not uploaded: big.bin: HTTP 403 AccessDenied",
        tracking=TrackingRun(
            run_id="r1",
            experiment_id="7",
            url="http://mlflow:5000/#/experiments/7/runs/r1",
            status="FAILED",
            metrics={"val_loss": 0.25},
        ),
    )
    text = describe(_record(results))
    assert (
        "outputs    s3://b/p/jobs/job-1/outputs\n  metrics.json  (19 B)\n  model/w.bin  (7 B)"
        in text
    )
    assert "outputs    1 output(s) not uploaded: big.bin: HTTP 403 AccessDenied" in text
    assert (
        "mlflow     http://mlflow:5000/#/experiments/7/runs/r1 (FAILED)\n  val_loss = 0.25" in text
    )


def test_status_of_a_job_without_outputs_says_so() -> None:
    text = describe(_record(JobResults(outputs_note="no outputs")))
    assert text.splitlines()[-1] == "outputs    no outputs"
