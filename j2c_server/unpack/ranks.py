"""A multi-node job's rank on this node: the rendezvous variables, and torchrun's argv.

The backend starts ``j2c-unpack --nodes N`` once per node and says where rank 0 listens
(``MASTER_ADDR``, ``MASTER_PORT``) and which node this is, in its own words: ``J2C_NODE_RANK``
(local), ``SLURM_NODEID`` (Slurm, one task per node) or ``JOB_COMPLETION_INDEX`` (a Kubernetes
Indexed Job). This module turns that into the conventional set every rank sees: ``NODE_RANK``,
``NNODES``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` and, when the entry point itself is
the one process of its node, ``RANK`` and ``LOCAL_RANK`` (with ``--launcher torchrun``, torchrun
sets those two and ``WORLD_SIZE`` for each worker it starts).

Standard library only, like the rest of j2c-unpack.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from j2c_server.unpack.errors import EntryNotRunnable

# Where each backend puts the node's rank, in the order they are looked at.
RANK_SOURCES = ("J2C_NODE_RANK", "SLURM_NODEID", "JOB_COMPLETION_INDEX")
TORCHRUN_MODULE = "torch.distributed.run"


@dataclass(frozen=True)
class NodeRank:
    nodes: int
    rank: int
    master_addr: str
    master_port: int

    def environment(self, *, launcher: str) -> dict[str, str]:
        env = {
            "NNODES": str(self.nodes),
            "NODE_RANK": str(self.rank),
            "J2C_NODE_RANK": str(self.rank),
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
        }
        if launcher == "none":
            # One process per node: the node's rank is the process's rank.
            env.update(WORLD_SIZE=str(self.nodes), RANK=str(self.rank), LOCAL_RANK="0")
        return env


SINGLE_NODE = NodeRank(nodes=1, rank=0, master_addr="127.0.0.1", master_port=29500)


def node_rank(nodes: int, environ: Mapping[str, str]) -> NodeRank:
    """This node's place in the job, from what the backend set; a clear error when missing."""
    if nodes == 1:
        return NodeRank(
            nodes=1,
            rank=0,
            master_addr=environ.get("MASTER_ADDR") or "127.0.0.1",
            master_port=_port(environ.get("MASTER_PORT") or "29500"),
        )
    source = next((name for name in RANK_SOURCES if environ.get(name)), None)
    if source is None:
        raise EntryNotRunnable(
            f"a job on {nodes} nodes needs its node's rank in one of {', '.join(RANK_SOURCES)}",
            field="nodes",
        )
    raw = environ[source]
    if not raw.isdigit() or int(raw) >= nodes:
        raise EntryNotRunnable(
            f"{source}={raw!r} is not a node rank of a job on {nodes} nodes", field="nodes"
        )
    addr = environ.get("MASTER_ADDR", "")
    if not addr:
        raise EntryNotRunnable(f"a job on {nodes} nodes needs MASTER_ADDR", field="nodes")
    return NodeRank(
        nodes=nodes, rank=int(raw), master_addr=addr, master_port=_port(environ.get("MASTER_PORT"))
    )


def torchrun_command(
    python: str, entry: list[str], rank: NodeRank, nproc_per_node: int, job_id: str
) -> list[str]:
    """``python -m torch.distributed.run ... <entry>`` for an entry argv ``[python, script,
    ...]`` or ``[python, -m, module, ...]`` (the venv's interpreter runs torchrun, so torch comes
    from the venv). Static rendezvous: the node rank is fixed, rank 0's node is the endpoint."""
    target = entry[1:]
    return [
        python,
        "-m",
        TORCHRUN_MODULE,
        f"--nnodes={rank.nodes}",
        f"--nproc-per-node={nproc_per_node}",
        f"--node-rank={rank.rank}",
        f"--rdzv-endpoint={rank.master_addr}:{rank.master_port}",
        f"--rdzv-id={job_id or 'j2c'}",
        *(["--module"] if target[:1] == ["-m"] else []),
        *(target[1:] if target[:1] == ["-m"] else target),
    ]


def _port(raw: str | None) -> int:
    if raw is None or not raw.isdigit() or not 0 < int(raw) < 65536:
        raise EntryNotRunnable(
            f"MASTER_PORT={raw!r} is not a TCP port (1-65535)", field="MASTER_PORT"
        )
    return int(raw)
