"""A Slurm job preempted by a higher-priority job resumes from its last synced checkpoint as
the next attempt of the same job; a node failure set by ``scontrol`` does too.

The real Slurm of the suite (``scripts/slurm-up.sh``): partition ``spot`` is preemptible
(``PreemptMode=CANCEL``), ``urgent`` has a higher ``PriorityTier``. The j2c job takes both
fake GPUs in ``spot``; a plain ``sbatch -p urgent --gres=gpu:2`` then needs them, and Slurm
preempts the j2c job (state ``PREEMPTED``). Its j2c-unpack gets SIGTERM first (``KillWait``
later SIGKILL), which also starts a last sync of its checkpoints.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from j2c_server.config import J2CSettings
from j2c_server.jobs.service import JobService
from j2c_server.wire.api import EventKind, JobRequest, JobStatus, Resources
from j2c_server.wire.event_frames import diary_text
from tests.support.jobs import settle
from tests.support.resumable import first_line, last_step, resume_bytes, starts, write_resumable
from tests.support.slurm import SlurmCluster

STEPS = 40
PAUSE_S = 0.25


def _settings(cluster: SlurmCluster, data: Path) -> J2CSettings:
    # The job runs on this machine: j2c-unpack comes from this interpreter's venv.
    settings = cluster.settings(
        partition="spot", env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    )
    resume = settings.resume.model_copy(update={"sync_every_s": 1.0, "backoff_s": 0.5})
    return settings.model_copy(update={"data_dir": str(data), "resume": resume})


def _slurm(cluster: SlurmCluster, *args: str) -> subprocess.CompletedProcess[str]:
    if cluster.conf is None:
        pytest.skip("SLURM_CONF is not known: the command-line tools cannot be used")
    return subprocess.run(
        list(args),
        env={**os.environ, "SLURM_CONF": cluster.conf},
        capture_output=True,
        text=True,
        timeout=60,
    )


async def _interrupted_and_resumed(
    cluster: SlurmCluster, tmp_path: Path, interrupt: str
) -> tuple[list[str], float, object]:
    project = tmp_path / "proj"
    write_resumable(project)
    settle(project)
    service = JobService(_settings(cluster, tmp_path / "data"))
    service.start()
    urgent: str | None = None
    try:
        record = await service.submit(
            JobRequest(
                code_path=str(project),
                call_path="resumable.py",
                args=[str(STEPS), str(PAUSE_S)],
                scheduler="slurm",
                resources=Resources(gpus=2),
            )
        )
        step = await first_line(service, record.id, "step 6")
        await first_line(service, record.id, "j2c: checkpoints: synced", after=step.seq)
        running = await service.get(record.id)
        assert running.handle is not None
        if interrupt == "preempt":
            # Its output goes to the test's folder, not sbatch's default slurm-N.out in the cwd.
            done = _slurm(
                cluster,
                "sbatch",
                "-p",
                "urgent",
                "--gres=gpu:2",
                "--parsable",
                "--output",
                str(tmp_path / "urgent.out"),
                "--wrap",
                "sleep 3",
            )
            assert done.returncode == 0, done.stderr
            urgent = done.stdout.strip()
        else:
            node = _slurm(cluster, "squeue", "-h", "-j", running.handle.id, "-o", "%N").stdout
            done = _slurm(
                cluster,
                "scontrol",
                "update",
                f"nodename={node.strip()}",
                "state=down",
                "reason=j2c test: a lost node",
            )
            assert done.returncode == 0, done.stderr
        interrupted_at = time.time()
        if interrupt == "node":
            await first_line(service, record.id, "attempt 1 of 4 ended")
            _slurm(cluster, "scontrol", "update", f"nodename={node.strip()}", "state=resume")
        resumed = await first_line(service, record.id, "attempt 2 starts at step")
        async with asyncio.timeout(180):
            final = await service.wait(record.id)
        events = await service.events(record.id)
    finally:
        await service.stop()
        if urgent:
            cluster.scancel([urgent])
    lines = [diary_text(e.model_dump(mode="json")) for e in events if e.kind == EventKind.log]
    assert final.status == JobStatus.succeeded, lines[-30:]
    return lines, resumed.time - interrupted_at, final


@pytest.mark.slurm
async def test_a_preempted_slurm_job_resumes_from_its_last_checkpoint(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    lines, seconds, final = await _interrupted_and_resumed(slurm_cluster, tmp_path, "preempt")
    (first, at0, _), (second, at, restored) = starts(lines)
    assert (first, at0, second) == (1, 0, 2)
    assert 6 < at <= STEPS - 1 and restored == f"checkpoints/step_{at - 1:04d}"
    assert last_step(lines) == STEPS - 1
    ended = final.attempts[0]  # type: ignore[attr-defined]
    assert ended.interrupted and ended.reason == "preempted (Slurm state PREEMPTED)"
    assert ended.node == "j2c"
    print(
        f"slurm: preemption to the resumed first step {seconds:.2f} s; "
        f"the resumed attempt: {resume_bytes(lines)}"
    )


@pytest.mark.slurm
async def test_a_slurm_job_whose_node_failed_resumes(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    lines, _, final = await _interrupted_and_resumed(slurm_cluster, tmp_path, "node")
    (_, _, _), (second, at, _) = starts(lines)
    assert second == 2 and at > 6
    # Slurm requeues a job whose node failed (slurmrestd drops requeue: false); j2c cancels
    # that run-from-scratch and resumes from the checkpoint instead.
    reason = final.attempts[0].reason  # type: ignore[attr-defined]
    assert reason in (
        "its node failed (Slurm state NODE_FAIL)",
        "requeued by Slurm (its node failed, or it was preempted or requeued)",
    )
