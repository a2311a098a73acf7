"""The node layer cache through the real Slurm of the test suite (``scripts/slurm-up.sh``):
``scheduler.slurm.cache_dir`` reaches the job as this user's ``J2C_UNPACK_CACHE``, and the second
job of a manifest on the node starts from the cache."""

from __future__ import annotations

import asyncio
import re
import shutil
import sys
from pathlib import Path

import pytest

from j2c_server.schedulers.slurm.job import job_environment
from j2c_server.schedulers.slurm.settings import SlurmSettings
from j2c_server.schedulers.unpack_cache import tenant_name
from j2c_server.wire.api import JobRequest, JobStatus
from tests.support.slurm import SlurmCluster

pytestmark = pytest.mark.slurm

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "digits"
HITS = re.compile(r"(\d+) of (\d+) layers from the cache, (\d+) built")


def _hits(lines: list[str]) -> tuple[int, int, int]:
    (found,) = [m for line in lines if (m := HITS.search(line))]
    hits, total, built = (int(group) for group in found.groups())
    return hits, total, built


async def test_the_second_job_on_the_node_is_a_cache_hit(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    from j2c_server.jobs.service import JobService

    project = tmp_path / "digits"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns(".venv", "outputs"))
    cache = tmp_path / "node-cache"
    settings = slurm_cluster.settings(
        env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}, cache_dir=str(cache)
    )
    settings = settings.model_copy(update={"data_dir": str(tmp_path / "data")})
    service = JobService(settings)
    service.start()
    runs = []
    try:
        for samples in ("200", "201"):  # two requests of one project: the same layers
            record = await service.submit(
                JobRequest(
                    code_path=str(project),
                    call_path=str(project / "train.py"),
                    args=["--epochs", "1", "--samples", samples],
                    scheduler="slurm",
                )
            )
            async with asyncio.timeout(120):
                final = await service.wait(record.id)
            lines = [e.text or "" for e in await service.events(record.id) if e.kind.value == "log"]
            assert final.status == JobStatus.succeeded, (final.message, lines[-5:])
            runs.append(lines)
    finally:
        await service.stop()
    cold, warm = (_hits(lines) for lines in runs)
    assert cold[0] == 0 and cold[2] == cold[1] >= 1, runs[0]
    assert warm == (cold[1], cold[1], 0), runs[1]
    assert (cache / tenant_name() / "entries").is_dir()


def test_the_cache_setting_is_this_users_folder_and_wins_over_a_requests_env() -> None:
    from j2c_server.schedulers.base import JobSpec

    spec = JobSpec(
        key="k", job_id="j", name="n", command=["j2c-unpack"], env={"J2C_UNPACK_CACHE": "/x"}
    )
    env = job_environment(spec, SlurmSettings(cache_dir="/local/j2c/", cache_max="50G"))
    assert env["J2C_UNPACK_CACHE"] == f"/local/j2c/{tenant_name()}"
    assert env["J2C_UNPACK_CACHE_MAX"] == "50G"
    assert "J2C_UNPACK_CACHE_MAX" not in job_environment(spec, SlurmSettings())
