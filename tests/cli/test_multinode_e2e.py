"""Multi-node jobs end to end: ``j2c submit --nodes 2`` in a subprocess, two ranks of the real
j2c-unpack, and ranks that really meet over TCP at ``MASTER_ADDR:MASTER_PORT`` and all-reduce
(sum) a value. On the local scheduler (two ranks under its supervisor) and on a real Slurm with
two nodes: two slurmd daemons on this machine (``J2C_SLURM_NODES=2 scripts/slurm-up.sh``),
started for this module and stopped after it."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.cli.test_submit_e2e import wait_for_status
from tests.support.ci import engine_missing
from tests.support.frontends import RunJ2C
from tests.support.podman import Podman

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
# Every rank writes where scripts do: its own file, and one the same on every rank.
os.makedirs("models", exist_ok=True)
open(f"models/rank-{rank}.txt", "w").write(f"rank {rank}: {total}")
open("config.json", "w").write('{"world": %d}' % world)
time.sleep(float(arg("--sleep", 0)))
"""


REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def slurm_two_nodes() -> Iterator[dict[str, str]]:
    """A throw-away Slurm with nodes j2c1 and j2c2 on this machine: its settings as env."""
    # slurmrestd runs as user slurm: the folder must be reachable by others (not pytest's).
    folder = tempfile.mkdtemp(prefix="j2c-slurm2-", dir="/tmp")
    os.chmod(folder, 0o755)
    up = subprocess.run(
        [REPO / "scripts" / "slurm-up.sh", folder],
        env={**os.environ, "J2C_SLURM_NODES": "2"},
        capture_output=True,
        text=True,
        timeout=180,
    )
    if up.returncode == 2:
        engine_missing(f"no Slurm here: {up.stderr.strip()}")
    assert up.returncode == 0, up.stderr
    env = {}
    for line in up.stdout.splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        env[name] = value
    # The nodes run this checkout's j2c-unpack, with this interpreter's packages.
    bin_dir = Path(sys.executable).parent
    env["J2C_SCHEDULER__SLURM__ENV__PATH"] = f"{bin_dir}:/usr/bin:/bin"
    env["J2C_SCHEDULER__SLURM__ENV__PYTHONPATH"] = str(REPO)
    try:
        yield env
    finally:
        subprocess.run([REPO / "scripts" / "slurm-down.sh", folder], timeout=60, check=False)


@pytest.fixture(params=["local", "slurm", "container"])
def backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, str]]:
    if request.param == "slurm":
        return "slurm", request.getfixturevalue("slurm_two_nodes")
    if request.param == "container":
        # Two containers of the platform image on a network of the job's own.
        podman: Podman = request.getfixturevalue("podman")
        store = request.getfixturevalue("tmp_path") / "store"
        return "container", {
            "J2C_STORAGE__URL": store.as_uri(),
            "J2C_STORAGE__SHARED": "true",  # the job's uid reads the layers
            "J2C_SCHEDULER__CONTAINER__SOCKET": podman.socket,
            "J2C_DEFAULT_IMAGE": podman.image,
        }
    return "local", {}


@pytest.fixture
def run_j2c(run_j2c: RunJ2C, tmp_path: Path, backend: tuple[str, dict[str, str]]) -> RunJ2C:
    """``j2c`` on the backend under test; the local supervisor and j2c-unpack import this
    checkout too (local jobs get a clean environment)."""
    name, backend_env = backend
    config = tmp_path / "j2c.yaml"
    config.write_text(f"scheduler:\n  default: {name}\n  local:\n    pass_env: [PYTHONPATH]\n")

    def run(*args: str, **kwargs: Any) -> Any:
        kwargs["env"] = {"J2C_CONFIG": str(config), **backend_env, **kwargs.get("env", {})}
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
    result = run_j2c(*submit(cli_venv, "-v"), cwd=ranks_project)
    assert result.returncode == 0, result.stderr
    # Both ranks got the sum (10 + 20), each line prefixed with its rank (j2c's too: -v).
    lines = result.stdout.splitlines()
    assert "[0] rank 0 of 2: sum 30" in lines
    assert "[1] rank 1 of 2: sum 30" in lines
    assert "[1] j2c: running: node rank 1 of 2" in result.stderr
    job = json.loads(run_j2c("list", "--json").stdout)[0]
    assert job["request"]["resources"]["nodes"] == 2
    # Every rank's outputs: rank 1's under rank-1/, the file both wrote alike listed once.
    listed = {a["name"]: a["sha256"] for a in job["results"]["artifacts"]}
    assert sorted(listed) == [
        "config.json",
        "models/rank-0.txt",
        "rank-1/models/rank-1.txt",
        "sum.txt",
    ]
    assert listed["rank-1/models/rank-1.txt"] == hashlib.sha256(b"rank 1: 30").hexdigest()
    note = job["results"]["outputs_note"]
    assert "rank 0: 3 files" in note
    assert "rank 1: 2 files under rank-1/, 1 identical to rank 0's (listed once)" in note


def test_a_failing_rank_fails_the_job_with_its_exit_code(
    run_j2c: RunJ2C, ranks_project: Path, cli_venv: Path
) -> None:
    # Rank 0 would wait for rank 1 forever: the job ends because rank 1 failed.
    result = run_j2c(*submit(cli_venv, "--", "--fail-rank", "1", "--exit", "7"), cwd=ranks_project)
    assert result.returncode == 7, result.stderr
    assert "[1] rank 1 fails" in result.stdout
    assert "[1] rank 1 fails" in result.stdout
    # Why, as j2c says it by default: the exit code, and rank 1 (j2c's own line where the
    # backend's wrapper says which rank failed, Slurm's; else the rank's last line).
    failed = [line for line in result.stderr.splitlines() if " failed" in line]
    assert failed and "code 7" in failed[-1], result.stderr
    assert "rank 1" in result.stderr


@pytest.mark.parametrize("backend", ["local", "slurm"], indirect=True)
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


@pytest.mark.parametrize("backend", ["local"], indirect=True)
def test_a_backend_without_multi_node_refuses_nodes(
    run_j2c: RunJ2C, ranks_project: Path, cli_venv: Path
) -> None:
    result = run_j2c(*submit(cli_venv, "--scheduler", "ray"), cwd=ranks_project)
    assert result.returncode != 0
    assert "resources.nodes" in result.stderr


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return os.path.exists(f"/proc/{pid}")


# Stands in for torch (not installed here): ``python -m torch.distributed.run`` finds this
# package first in the entry's working folder and prints what torchrun would be asked to do.
FAKE_TORCHRUN = """\
import json, os, sys
names = ("NODE_RANK", "NNODES", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")
env = {name: os.environ.get(name) for name in names}
print("torchrun", json.dumps({"argv": sys.argv[1:], "env": env}), flush=True)
"""


@pytest.mark.parametrize("backend", ["local"], indirect=True)
def test_launcher_torchrun_starts_torchrun_on_every_node_for_the_entry_point(
    run_j2c: RunJ2C, ranks_project: Path, cli_venv: Path
) -> None:
    package = ranks_project / "torch" / "distributed"
    package.mkdir(parents=True)
    (ranks_project / "torch" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "run.py").write_text(FAKE_TORCHRUN)
    result = run_j2c(
        *submit(cli_venv, "--launcher", "torchrun", "--", "--lr", "1"), cwd=ranks_project
    )
    assert result.returncode == 0, result.stderr
    seen = {}
    for line in result.stdout.splitlines():
        prefix, _, rest = line.partition(" torchrun ")
        if rest:
            seen[prefix] = json.loads(rest)
    assert sorted(seen) == ["[0]", "[1]"]
    for rank in (0, 1):
        run = seen[f"[{rank}]"]
        addr, port = run["env"]["MASTER_ADDR"], run["env"]["MASTER_PORT"]
        assert run["argv"][:5] == [
            "--nnodes=2",
            "--nproc_per_node=1",
            f"--node_rank={rank}",
            f"--rdzv_endpoint={addr}:{port}",
            run["argv"][4],
        ]
        assert run["argv"][4].startswith("--rdzv_id=")
        assert run["argv"][5].endswith("/allreduce.py") and run["argv"][6:] == ["--lr", "1"]
        # torchrun sets RANK and WORLD_SIZE for its workers; j2c leaves them to it.
        assert run["env"]["NODE_RANK"] == str(rank) and run["env"]["NNODES"] == "2"
        assert run["env"]["RANK"] is None and run["env"]["WORLD_SIZE"] is None


def _engine_objects(podman: Podman, kind: str, job_id: str) -> list[dict[str, Any]]:
    """The engine's containers (or networks) of this job, by its label."""
    filters = json.dumps({"label": [f"j2c.io/job-id={job_id}"]} if kind == "containers" else {})
    path = "/v1.41/containers/json" if kind == "containers" else "/v1.41/networks"
    transport = httpx.HTTPTransport(uds=podman.socket)
    with httpx.Client(transport=transport, base_url="http://engine") as client:
        found = client.get(path, params={"all": "1", "filters": filters}).json()
    assert isinstance(found, list)
    return found


@pytest.mark.parametrize("backend", ["container"], indirect=True)
def test_cancel_stops_every_container_and_the_jobs_network_goes(
    run_j2c: RunJ2C, ranks_project: Path, cli_venv: Path, podman: Podman
) -> None:
    args = ["--no-wait", "--json", "--", "--sleep", "600"]
    job_id = json.loads(run_j2c(*submit(cli_venv, *args), cwd=ranks_project).stdout)["id"]
    assert wait_for_status(run_j2c, job_id, {"running"})["status"] == "running"
    ranks = _engine_objects(podman, "containers", job_id)
    assert sorted(c["Labels"]["j2c.io/rank"] for c in ranks) == ["0", "1"]
    networks = {str(n.get("Name") or n.get("name")) for n in _engine_objects(podman, "n", job_id)}
    assert {f"{c['Names'][0].lstrip('/').split('-r')[0]}-net" for c in ranks} <= networks

    assert run_j2c("cancel", job_id).returncode == 0
    record = wait_for_status(run_j2c, job_id, {"cancelled", "failed", "succeeded"})
    assert record["status"] == "cancelled"
    deadline = time.monotonic() + 30
    while _engine_objects(podman, "containers", job_id) and time.monotonic() < deadline:
        time.sleep(0.2)  # the results stage removes them once it read them
    assert _engine_objects(podman, "containers", job_id) == []
    left = {str(n.get("Name") or n.get("name")) for n in _engine_objects(podman, "n", job_id)}
    assert not {name for name in left if name in networks and name.startswith("j2c-")}


@pytest.mark.parametrize("backend", ["container"], indirect=True)
def test_gpus_over_several_containers_on_one_machine_are_refused_with_what_works(
    run_j2c: RunJ2C, ranks_project: Path, cli_venv: Path
) -> None:
    result = run_j2c(*submit(cli_venv, "--gpus", "1"), cwd=ranks_project)
    assert result.returncode != 0
    assert "resources.nodes" in result.stderr and "1 node and 2 GPUs" in result.stderr
