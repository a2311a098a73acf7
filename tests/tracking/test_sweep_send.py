"""A sweep sent through the service with tracking on: every variant runs under its own MLflow
run, nested in the sweep's parent run, all made before the first variant was submitted (a real
``mlflow server``; ``tests/tracking/mlflow_server.py``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from j2c_server.config import load_settings
from j2c_server.sweeps.hook import job_service
from j2c_server.wire.api import EventKind, JobRequest, JobStatus
from j2c_server.wire.sweep import SweepSpec
from tests.tracking.mlflow_server import MlflowServer

SCRIPT = 'import os, sys\nprint("run", os.environ.get("MLFLOW_RUN_ID"), sys.argv[1:])\n'


async def test_each_variant_of_a_sent_sweep_runs_under_its_own_nested_run(
    j2c_data_dir: Path, tmp_path: Path, mlflow_server: MlflowServer
) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text(SCRIPT)
    settings = load_settings(
        environ={},
        overrides={"mlflow": {"tracking_uri": mlflow_server.url, "experiment": "sent-sweeps"}},
    )
    service = job_service(settings)
    try:
        parent = await service.submit(
            JobRequest(
                code_path=str(project),
                call_path="train.py",
                args=["--lr", "{lr}"],
                sweep=SweepSpec(grid={"lr": ["0.1", "0.2", "0.3"]}),
            )
        )
        assert parent.sweep is not None
        final = await asyncio.wait_for(service.wait(parent.id), 300)
        assert final.status == JobStatus.succeeded, final.message
        children = [await service.get(child) for child in parent.sweep.children]
        run_ids = []
        for child in children:
            await asyncio.wait_for(service.wait(child.id), 120)
            child = await service.get(child.id)
            assert child.results is not None and child.results.tracking is not None
            run_id = child.results.tracking.run_id
            log = [e.text or "" for e in await service.events(child.id) if e.kind == EventKind.log]
            assert any(line.startswith(f"run {run_id} ") for line in log), log[-5:]
            run_ids.append(run_id)
        assert len(set(run_ids)) == 3
        final = await service.get(parent.id)
        assert final.results is not None and final.results.tracking is not None
        parent_run = final.results.tracking.run_id
    finally:
        await service.stop()
    for run_id in run_ids:
        run = httpx.get(
            f"{mlflow_server.url}/api/2.0/mlflow/runs/get", params={"run_id": run_id}
        ).json()["run"]
        tags = {tag["key"]: tag["value"] for tag in run["data"].get("tags", [])}
        assert tags["mlflow.parentRunId"] == parent_run
