"""j2c-unpack's side of multi-node jobs: the node's rank from each backend's variable, the
rendezvous variables the entry point sees, and torchrun's argv."""

from __future__ import annotations

import pytest

from j2c_server.unpack.errors import EntryNotRunnable
from j2c_server.unpack.ranks import node_rank, torchrun_command

MASTER = {"MASTER_ADDR": "node-a", "MASTER_PORT": "29400"}


@pytest.mark.parametrize("variable", ["J2C_NODE_RANK", "SLURM_NODEID", "JOB_COMPLETION_INDEX"])
def test_the_rank_comes_from_each_backends_variable(variable: str) -> None:
    rank = node_rank(4, {**MASTER, variable: "3"})
    assert (rank.rank, rank.nodes, rank.master_addr, rank.master_port) == (3, 4, "node-a", 29400)


def test_one_process_per_node_is_its_own_rank() -> None:
    env = node_rank(2, {**MASTER, "SLURM_NODEID": "1"}).environment(launcher="none")
    assert env == {
        "NNODES": "2",
        "NODE_RANK": "1",
        "J2C_NODE_RANK": "1",
        "MASTER_ADDR": "node-a",
        "MASTER_PORT": "29400",
        "WORLD_SIZE": "2",
        "RANK": "1",
        "LOCAL_RANK": "0",
    }


def test_under_torchrun_rank_and_world_size_are_torchruns() -> None:
    env = node_rank(2, {**MASTER, "SLURM_NODEID": "0"}).environment(launcher="torchrun")
    assert "RANK" not in env and "WORLD_SIZE" not in env and env["NODE_RANK"] == "0"


@pytest.mark.parametrize(
    ("environ", "words"),
    [
        (MASTER, "needs its node's rank"),
        ({**MASTER, "SLURM_NODEID": "2"}, "is not a node rank of a job on 2 nodes"),
        ({**MASTER, "SLURM_NODEID": "x"}, "is not a node rank"),
        ({"SLURM_NODEID": "0", "MASTER_PORT": "1"}, "needs MASTER_ADDR"),
        ({"SLURM_NODEID": "0", "MASTER_ADDR": "a", "MASTER_PORT": "70000"}, "not a TCP port"),
    ],
)
def test_a_missing_or_wrong_rendezvous_is_a_clear_error(
    environ: dict[str, str], words: str
) -> None:
    with pytest.raises(EntryNotRunnable, match=words):
        node_rank(2, environ)


def test_torchrun_runs_a_script_or_a_module_with_a_static_rendezvous() -> None:
    rank = node_rank(2, {**MASTER, "SLURM_NODEID": "1"})
    script = torchrun_command(
        "/v/bin/python", ["/v/bin/python", "/c/train.py", "--lr", "1"], rank, 4, "j1"
    )
    assert script == [
        "/v/bin/python",
        "-m",
        "torch.distributed.run",
        "--nnodes=2",
        "--nproc_per_node=4",
        "--node_rank=1",
        "--rdzv_endpoint=node-a:29400",
        "--rdzv_id=j1",
        "/c/train.py",
        "--lr",
        "1",
    ]
    module = torchrun_command(
        "/v/bin/python", ["/v/bin/python", "-m", "pkg.train", "-x"], rank, 1, "j1"
    )
    assert module[-4:] == ["--rdzv_id=j1", "--module", "pkg.train", "-x"]
