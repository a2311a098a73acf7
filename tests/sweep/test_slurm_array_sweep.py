"""A sweep on the real Slurm of the test suite (``scripts/slurm-up.sh``) runs as **one array
job**: one Slurm job id, six tasks in ``squeue``, each task its own variant's args and log, the
upload done once; cancelling the parent stops every task, queued ones included."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from j2c_server.jobs.service import JobService
from j2c_server.sweeps.hook import job_service
from j2c_server.wire.api import EventKind, JobRequest, JobStatus
from j2c_server.wire.sweep import SweepSpec
from tests.support.ci import engine_missing
from tests.support.jobs import sweep_children_submitted
from tests.support.slurm import SlurmCluster

pytestmark = pytest.mark.slurm

SCRIPT = """
import os, sys, time
print("variant args:", " ".join(sys.argv[1:]), "job", os.environ["J2C_JOB_ID"], flush=True)
time.sleep(float(sys.argv[-1]))
"""
GRID = {"lr": ["1e-3", "3e-4", "1e-4"], "seed": ["0", "1"]}


def _request(project: Path, sleep: str, max_parallel: int) -> JobRequest:
    return JobRequest(
        code_path=str(project),
        call_path="train.py",
        args=["--lr", "{lr}", "--seed", "{seed}", sleep],
        scheduler="slurm",
        sweep=SweepSpec.model_validate({"grid": GRID, "max_parallel": max_parallel}),
    )


def _service(slurm_cluster: SlurmCluster, tmp_path: Path, project: Path) -> JobService:
    project.mkdir()
    (project / "train.py").write_text(SCRIPT)
    settings = slurm_cluster.settings(env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"})
    service = job_service(settings.model_copy(update={"data_dir": str(tmp_path / "data")}))
    service.start()
    return service


def _squeue(cluster: SlurmCluster, array_id: str) -> list[str]:
    """The array's tasks as ``squeue`` lists them, one line a task (``-r``)."""
    if not cluster.conf:
        engine_missing("the Slurm command-line tools are not configured here")
    answer = subprocess.run(
        ["squeue", "-h", "-r", "-j", array_id, "-o", "%i %T"],
        env={**os.environ, "SLURM_CONF": cluster.conf},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return answer.stdout.split("\n")[:-1]


async def test_six_variants_run_as_one_array_job(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    service = _service(slurm_cluster, tmp_path, tmp_path / "proj")
    try:
        parent = await service.submit(_request(tmp_path / "proj", "3", max_parallel=2))
        children = await sweep_children_submitted(service, parent, 120)
        arrays = {c.handle.data["array"] for c in children if c.handle is not None}
        assert len(arrays) == 1, arrays  # one Slurm job for the whole sweep
        (array_id,) = arrays
        assert [c.handle.id for c in children if c.handle] == [f"{array_id}_{i}" for i in range(6)]
        listed = _squeue(slurm_cluster, array_id)
        assert len(listed) == 6 and all(line.startswith(f"{array_id}_") for line in listed)
        running = [line for line in listed if line.endswith("RUNNING")]
        assert len(running) <= 2, listed  # the `%2` throttle of max_parallel

        async with asyncio.timeout(240):
            final = await service.wait(parent.id)
            ended = [await service.wait(c.id) for c in children]
        assert final.status == JobStatus.succeeded, final.message
        assert final.sweep is not None and final.sweep.summary == "6/6 succeeded"
        assert "upload" in final.stages and all("upload" not in c.stages for c in ended)
        expected = [(lr, seed) for lr in GRID["lr"] for seed in GRID["seed"]]
        for (lr, seed), child in zip(expected, ended, strict=True):
            assert child.status == JobStatus.succeeded and child.exit_code == 0
            events = await service.events(child.id)
            log = "\n".join(e.text or "" for e in events if e.kind == EventKind.log)
            # Its own row, and its own job id filled in from the array's one template.
            assert f"variant args: --lr {lr} --seed {seed} 3 job {child.id}" in log, log
            assert any("task" in (e.text or "") and array_id in (e.text or "") for e in events), (
                "the child's timeline names its task of the array"
            )
    finally:
        await service.stop()


async def test_cancelling_the_parent_stops_running_and_queued_tasks(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    service = _service(slurm_cluster, tmp_path, tmp_path / "proj")
    array_id = ""
    try:
        parent = await service.submit(_request(tmp_path / "proj", "120", max_parallel=2))
        children = await sweep_children_submitted(service, parent, 120)
        array_id = str(children[0].handle.data["array"]) if children[0].handle else ""
        async with asyncio.timeout(60):  # two tasks running, four still queued
            while (await service.get(children[0].id)).status != JobStatus.running:
                await asyncio.sleep(0.2)
        await service.cancel(parent.id)
        async with asyncio.timeout(120):
            ended = [await service.wait(c.id) for c in children]
            final = await service.wait(parent.id)
        assert [c.status for c in ended] == [JobStatus.cancelled] * 6, [
            (c.status, c.message) for c in ended
        ]
        assert final.status == JobStatus.cancelled
        async with asyncio.timeout(30):
            while _squeue(slurm_cluster, array_id):
                await asyncio.sleep(0.5)
    finally:
        await service.stop()
        if array_id:
            slurm_cluster.scancel([array_id])
