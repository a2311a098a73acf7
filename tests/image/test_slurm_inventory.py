"""A real Slurm job teaches the lab its nodes' Python: ``j2c-unpack`` says the inventory, the
server keeps it under the partition's key, and the next preflight reads it without a probe."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from j2c_server.image.store import InventoryStore
from j2c_server.jobs.service import JobService
from j2c_server.schedulers.container import probe
from j2c_server.wire.api import JobRequest, JobStatus
from tests.support.jobs import diary, settle
from tests.support.slurm import REPO, SlurmCluster


@pytest.mark.slurm
async def test_a_slurm_jobs_inventory_is_what_the_next_preflight_reads(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "hello.py").write_text("print('hello from slurm', flush=True)\n")
    settle(project)
    # The node is this machine: j2c-unpack from this venv, this checkout's code.
    node_env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    settings = slurm_cluster.settings(env=node_env).model_copy(
        update={"data_dir": str(tmp_path / "data")}
    )
    request = JobRequest(code_path=str(project), call_path="hello.py", scheduler="slurm")
    service = JobService(settings)
    try:
        first = await service.preflight(request)
        assert first.image_report is not None and not first.image_report.known
        assert first.image_report.message == (
            "slurm partition default not known yet: checked when the job starts"
        )
        record = await service.submit(request)
        done = await service.wait(record.id)
        events = await service.events(record.id)
        assert done.status == JobStatus.succeeded, [e.text for e in events][-8:]
        said = diary(events)
        assert any(t.startswith("j2c: inventory: Python ") for t in said), said
        key = first.image_report.key
        assert key == f"slurm:{slurm_cluster.url}#default"
        kept = InventoryStore(settings.data_path()).get(key)
        assert kept is not None and kept.source == "job"

        before = probe.probes_started
        again = await service.preflight(request)
        assert probe.probes_started == before
        assert again.image_report is not None and again.image_report.known
        assert again.image_report.source == "job"
    finally:
        await service.stop()
