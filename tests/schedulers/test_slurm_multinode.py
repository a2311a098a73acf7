"""The Slurm backend's multi-node script and description, without a cluster (a real two-node
Slurm runs them in ``tests/cli/test_multinode_e2e.py``): the script is also run here by bash
with stand-ins for ``scontrol`` and ``srun``, to check the variables and the exit code rule."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

from j2c_server.core.j2c_lines import TAG_ENV, line_tag, parse_line
from j2c_server.schedulers.slurm.job import (
    SRUN_PIECE,
    RankLines,
    batch_script,
    job_description,
    label_rank,
)
from j2c_server.schedulers.slurm.settings import SlurmSettings
from j2c_server.wire.api import Resources
from tests.schedulers.test_slurm_job import OUTPUT, spec

TAG = line_tag("20260101-000000-abcdef")


TWO = Resources(nodes=2, gpus=2)


def test_the_description_asks_for_one_task_on_each_node() -> None:
    job = job_description(spec(resources=TWO), SlurmSettings(), OUTPUT)
    assert (job["nodes"], job["tasks"], job["tasks_per_node"]) == (2, 2, 1)
    assert job["gres"] == "gpu:2"  # per node, as Slurm counts gres


def test_a_one_node_job_keeps_its_plain_exec_script() -> None:
    script = batch_script(spec(), SlurmSettings(), Path("/shared/j2c/job-1"))
    assert "srun" not in script and "\nexec j2c-unpack " in script
    assert "tasks_per_node" not in job_description(spec(), SlurmSettings(), OUTPUT)


def test_label_rank_reads_sruns_task_prefix() -> None:
    assert label_rank("1: epoch 3") == (1, "epoch 3")
    assert label_rank(" 12: x: y") == (12, "x: y")
    assert label_rank("srun: error: j2c2: task 1: Exited") == (
        None,
        "srun: error: j2c2: task 1: Exited",
    )


def test_a_long_line_srun_relayed_in_pieces_is_one_line_again() -> None:
    # What srun --label wrote for a 2.5 kB line of rank 1 while rank 0 printed between.
    long = "x" * (2 * SRUN_PIECE + 500)
    pieces = [long[i : i + SRUN_PIECE] for i in range(0, len(long), SRUN_PIECE)]
    lines = RankLines()
    fed = [
        lines.feed(f"1: {pieces[0]}"),
        lines.feed("0: step 1"),
        lines.feed(f"1: {pieces[1]}"),
        lines.feed(f"1: {pieces[2]}"),
        lines.feed("1: next"),
    ]
    assert fed == [None, (0, "step 1"), None, (1, long), (1, "next")]
    # A line cut short by the job's end is still delivered.
    lines.feed(f"0: {'y' * SRUN_PIECE}")
    assert lines.rest() == [(0, "y" * SRUN_PIECE)]


def _fake_tool(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(f"#!/bin/bash\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def run_script(
    tmp_path: Path, rank_codes: list[tuple[int, int, int]]
) -> subprocess.CompletedProcess[str]:
    """The script under bash; srun plays each (end time, rank, code) and exits 143 as srun does
    when it had to kill the others."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _fake_tool(
        bin_dir,
        "scontrol",
        'case "$*" in "show hostnames"*) echo nodeA; echo nodeB;; '
        '"-o show node nodeA") echo "NodeName=nodeA Arch=x NodeAddr=10.1.2.3 NodeHostName=a";; '
        "esac",
    )
    writes = "; ".join(
        f'echo "{ended} {rank} {code}" > "$J2C_RANKS_DIR/{rank}.exit"'
        for ended, rank, code in rank_codes
    )
    _fake_tool(
        bin_dir, "srun", f'echo "srun $* MASTER=$MASTER_ADDR:$MASTER_PORT"; {writes}; exit 143'
    )
    run_dir = tmp_path / "run"
    script = batch_script(spec(resources=TWO), SlurmSettings(), run_dir)
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_ID": "12345"}
    env[TAG_ENV] = TAG  # as the job's environment has it (job_environment: the spec's env)
    env.pop("MASTER_PORT", None)
    return subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=30
    )


def test_the_script_sets_the_rendezvous_and_runs_one_task_per_node(tmp_path: Path) -> None:
    done = run_script(tmp_path, [(1, 0, 0), (2, 1, 0)])
    assert "MASTER=10.1.2.3:32345" in done.stdout  # the first node's address; 20000 + id % 20000
    assert "--nodes=2 --ntasks=2 --ntasks-per-node=1 --kill-on-bad-exit=1 --label" in done.stdout
    assert "bash -c" in done.stdout and "j2c-rank j2c-unpack" in done.stdout
    # Every rank succeeded: srun's own code stands.
    assert done.returncode == 143


def test_the_jobs_exit_code_is_the_first_failed_ranks(tmp_path: Path) -> None:
    # Rank 1 failed first with 7; rank 0 was then terminated (143), later.
    done = run_script(tmp_path, [(200, 0, 143), (100, 1, 7)])
    assert done.returncode == 7
    # j2c's line, as the watch stage reads it.
    [said] = [parsed for line in done.stderr.splitlines() if (parsed := parse_line(line, TAG))]
    assert (said.level, said.phase, said.text) == (
        "error",
        "running",
        "rank 1 failed with exit code 7",
    )
