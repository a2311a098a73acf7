"""The chaos soak's short forms (benchmarks/soak.py): sends through a real Jupyter server while
the seeded fault driver kills the server, jobs' ``j2c-unpack`` and viewers' sockets; on the S3
leg, also fails the store's requests (moto behind the fault proxy); on the container leg the
jobs are podman containers, on the Slurm leg jobs of a real Slurm; on the full-disk leg the data
dir is a small tmpfs that a ballast file fills for a moment now and then.

Whatever the timing, every invariant must hold: each job ends as its history calls for, one job
per send, every viewer sees every event once and in order across reconnects, a usage record
per job, each job's log the lines it printed, no job's process left behind, nothing left on
the engine. A failure prints the violations and the seed. The container and Slurm legs skip,
saying why, where podman or Slurm cannot be had (tests/support/podman.py, slurm.py); the
full-disk leg where no tmpfs can be mounted (not root); under CI each fails instead
(tests/support/ci.py). What the checker itself catches: test_soak_check_planted.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.ci import engine_missing
from tests.support.podman import Podman
from tests.support.slurm import SlurmCluster

SOAK = Path(__file__).resolve().parents[2] / "benchmarks" / "soak.py"
CANNOT_RUN_HERE = 2  # soak.py's exit code when this machine cannot run the leg


def soak(
    tmp_path: Path, *argv: str, env: dict[str, str] | None = None
) -> tuple[dict[str, Any], str]:
    """Run the soak (``env`` added to its environment); its report (violations, faults) and
    its table."""
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, str(SOAK), *argv, "--report", str(report)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )
    if done.returncode == CANNOT_RUN_HERE:
        engine_missing(done.stderr.strip().splitlines()[-1])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result: dict[str, Any] = json.loads(report.read_text())
    assert result["problems"] == []
    assert "invariant violations                                0  0" in done.stdout
    return result, done.stdout


def test_thirty_sends_under_faults_keep_every_invariant(tmp_path: Path):
    result, _ = soak(tmp_path, "--jobs", "30", "--seed", "11", "--faults-per-min", "20")
    kinds = {fault[1] for fault in result["faults"]}
    assert "server" in kinds, f"the seed drove no server kill: {result['faults']}"


def test_sends_through_a_failing_s3_store_keep_every_invariant(tmp_path: Path):
    """Bursts of 503s, 500s and resets, for the server and the jobs' j2c-unpack alike."""
    argv = ["--jobs", "12", "--seed", "11", "--faults-per-min", "30", "--store", "s3"]
    result, table = soak(tmp_path, *argv)
    kinds = {fault[1] for fault in result["faults"]}
    assert {"s3", "server"} <= kinds, f"the seed drove no S3 fault or server kill: {kinds}"
    failed = [line for line in table.splitlines() if line.startswith("S3 requests failed")]
    assert failed, table  # the proxy did fail requests, not only queue them


def fault_kinds(result: dict[str, Any]) -> set[str]:
    return {fault[1] for fault in result["faults"]}


def test_sends_while_the_data_dir_runs_full_keep_every_invariant(tmp_path: Path):
    """A 128 MB tmpfs data dir taken whole by a ballast file for 1.5 s at a time: nothing the
    server acknowledged is lost, no job reads ``lost``, and every send ends in one job."""
    argv = ["--jobs", "8", "--seed", "3", "--faults-per-min", "30", "--disk-full"]
    result, table = soak(tmp_path, *argv, "--disk-mb", "128")
    assert {"disk_full", "server"} <= fault_kinds(result), result["faults"]
    assert "disk fills: MB taken" in table


def test_container_jobs_under_faults_keep_every_invariant_and_leave_no_container(
    tmp_path: Path, podman: Podman
):
    """The jobs are podman containers of the platform image (an ``unpack`` fault kills the
    container's ``j2c-unpack``); once every result is in, none of this server's containers is
    left on the engine."""
    env = {
        "J2C_SCHEDULER__CONTAINER__SOCKET": podman.socket,
        "PLATFORM_IMAGE": podman.image,
        "CONTAINERS_CONF": os.environ["CONTAINERS_CONF"],  # set by the podman fixture
    }
    argv = ["--jobs", "6", "--seed", "11", "--faults-per-min", "30", "--backend", "container"]
    result, table = soak(tmp_path, *argv, env=env)
    assert "server" in fault_kinds(result), result["faults"]
    assert "container" in table


@pytest.mark.slurm
def test_slurm_jobs_under_faults_keep_every_invariant(tmp_path: Path, slurm_cluster: SlurmCluster):
    """The jobs are a real Slurm's (an ``unpack`` fault kills the Slurm step's ``j2c-unpack``);
    none of the soak's jobs is left in the queue."""
    env = {
        "J2C_SCHEDULER__SLURM__URL": slurm_cluster.url,
        "J2C_SCHEDULER__SLURM__USER": slurm_cluster.user,
        "J2C_SCHEDULER__SLURM__TOKEN": slurm_cluster.token,
        "J2C_SCHEDULER__SLURM__JOB_DIR": str(slurm_cluster.job_dir),
    }
    argv = ["--jobs", "6", "--seed", "11", "--faults-per-min", "30", "--backend", "slurm"]
    result, _ = soak(tmp_path, *argv, env=env)
    assert "server" in fault_kinds(result), result["faults"]
