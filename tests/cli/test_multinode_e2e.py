"""Multi-node jobs on the local scheduler, end to end: ``j2c submit --nodes 2`` in a subprocess,
the real supervisor starting two ranks of the real j2c-unpack, and ranks that really meet over
TCP at ``MASTER_ADDR:MASTER_PORT`` and all-reduce (sum) a value."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.cli.test_submit_e2e import wait_for_status
from tests.support.frontends import RunJ2C

# Rank 0 listens, every other rank sends its value and gets the sum back: an all-reduce over
# plain sockets, with the rendezvous variables j2c sets and nothing else.
ALLREDUCE = """\
import os, socket, sys, time
args = sys.argv[1:]
def arg(name, default):
    return args[args.index(name) + 1] if name in args else default
rank, world = int(os.environ["NODE_RANK"]), int(os.environ["WORLD_SIZE"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
assert os.environ["NNODES"] == str(world) and os.environ["RANK"] == str(rank)
pid_dir = arg("--pids", None)
if pid_dir:
    open(os.path.join(pid_dir, f"rank-{rank}"), "w").write(str(os.getpid()))
if int(arg("--fail-rank", -1)) == rank:
    print(f"rank {rank} fails", flush=True)
    sys.exit(int(arg("--exit", 1)))
value = (rank + 1) * 10
if rank == 0:
    server = socket.create_server((addr, port))
    peers = [server.accept()[0] for _ in range(world - 1)]
    total = value + sum(int(p.makefile().readline()) for p in peers)
    for p in peers:
        p.sendall(f"{total}\\n".encode())
else:
    for _ in range(600):
        try:
            conn = socket.create_connection((addr, port))
            break
        except OSError:
            time.sleep(0.05)
    conn.sendall(f"{value}\\n".encode())
    total = int(conn.makefile().readline())
print(f"rank {rank} of {world}: sum {total}", flush=True)
if rank == 0:
    open(os.path.join(os.environ["J2C_OUTPUT_DIR"], "sum.txt"), "w").write(str(total))
time.sleep(float(arg("--sleep", 0)))
"""


@pytest.fixture
def run_j2c(run_j2c: RunJ2C, tmp_path: Path) -> RunJ2C:
    """The supervisor and j2c-unpack import this checkout too (jobs get a clean environment)."""
    config = tmp_path / "j2c.yaml"
    config.write_text("scheduler:\n  local:\n    pass_env: [PYTHONPATH]\n")

    def run(*args: str, **kwargs: Any) -> Any:
        kwargs["env"] = {"J2C_CONFIG": str(config), **kwargs.get("env", {})}
        return run_j2c(*args, **kwargs)

    return run


@pytest.fixture
def ranks_project(tmp_path: Path) -> Path:
    root = tmp_path / "ranks"
    root.mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'ranks'\nversion = '0'\n")
    (root / "allreduce.py").write_text(ALLREDUCE)
    return root


def submit(venv: Path, *extra: str) -> list[str]:
    return ["submit", "allreduce.py", "--venv-path", str(venv), "--nodes", "2", *extra]


def test_two_ranks_meet_at_master_addr_and_all_reduce(
    run_j2c: RunJ2C, ranks_project: Path, cli_venv: Path
) -> None:
    result = run_j2c(*submit(cli_venv), cwd=ranks_project)
    assert result.returncode == 0, result.stderr
    # Both ranks got the sum (10 + 20), each line prefixed with its rank.
    lines = result.stdout.splitlines()
    assert "[0] rank 0 of 2: sum 30" in lines
    assert "[1] rank 1 of 2: sum 30" in lines
    assert "[1] j2c: running: node rank 1 of 2" in result.stderr
    job = json.loads(run_j2c("list", "--json").stdout)[0]
    assert job["request"]["resources"]["nodes"] == 2
    # The outputs are rank 0's.
    names = [artifact["name"] for artifact in job["results"]["artifacts"]]
    assert "sum.txt" in names


def test_a_failing_rank_fails_the_job_with_its_exit_code(
    run_j2c: RunJ2C, ranks_project: Path, cli_venv: Path
) -> None:
    # Rank 0 would wait for rank 1 forever: the job ends because rank 1 failed.
    result = run_j2c(*submit(cli_venv, "--", "--fail-rank", "1", "--exit", "7"), cwd=ranks_project)
    assert result.returncode == 7, result.stderr
    assert "[1] rank 1 fails" in result.stdout
    assert "exit code 7 on rank 1" in result.stderr


def test_cancel_stops_every_rank(
    run_j2c: RunJ2C, ranks_project: Path, cli_venv: Path, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    args = ["--no-wait", "--json", "--", "--sleep", "600", "--pids", str(pids)]
    job_id = json.loads(run_j2c(*submit(cli_venv, *args), cwd=ranks_project).stdout)["id"]
    deadline = time.monotonic() + 60
    while len(list(pids.iterdir())) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    ranks = [int(path.read_text()) for path in sorted(pids.iterdir())]
    assert len(ranks) == 2 and all(psutil.pid_exists(pid) for pid in ranks)
    assert wait_for_status(run_j2c, job_id, {"running"})["status"] == "running"

    assert run_j2c("cancel", job_id).returncode == 0
    record = wait_for_status(run_j2c, job_id, {"cancelled", "failed", "succeeded"})
    assert record["status"] == "cancelled"
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in ranks) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in ranks if _alive(pid)]


def test_a_backend_without_multi_node_refuses_nodes(
    run_j2c: RunJ2C, ranks_project: Path, cli_venv: Path
) -> None:
    result = run_j2c(*submit(cli_venv, "--scheduler", "container"), cwd=ranks_project)
    assert result.returncode != 0
    assert "resources.nodes" in result.stderr


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return os.path.exists(f"/proc/{pid}")
