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

import subprocess
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
    python: str,
    entry: list[str],
    rank: NodeRank,
    nproc_per_node: int,
    job_id: str,
    *,
    tee: bool = False,
) -> list[str]:
    """``python -m torch.distributed.run ... <entry>`` for an entry argv ``[python, script,
    ...]`` or ``[python, -m, module, ...]`` (the venv's interpreter runs torchrun, so torch comes
    from the venv). Static rendezvous: the node rank is fixed, rank 0's node is the endpoint.
    Options as torchrun spelled them before 2.0 (``--nproc_per_node``): every torch takes
    those, 1.13 no other. ``tee``: see :func:`torchrun_needs_tee`."""
    target = entry[1:]
    return [
        python,
        "-m",
        TORCHRUN_MODULE,
        f"--nnodes={rank.nodes}",
        f"--nproc_per_node={nproc_per_node}",
        f"--node_rank={rank.rank}",
        f"--rdzv_endpoint={rank.master_addr}:{rank.master_port}",
        f"--rdzv_id={job_id or 'j2c'}",
        *(["--redirects", "1", "--tee", "1"] if tee else []),
        *(["--module"] if target[:1] == ["-m"] else []),
        *(target[1:] if target[:1] == ["-m"] else target),
    ]


def torchrun_needs_tee(python: str) -> str | None:
    """Why torchrun must be given ``--redirects 1 --tee 1``, or None. torch 1.x on Python 3.11
    (Debian bookworm's ``python3-torch``) cannot parse its own default ``--redirects 0``: 3.11
    no longer iterates a Flag's zero member, its ``Std.from_str('0')`` is None and every launch
    dies with "'NoneType' object has no attribute 'get'". Redirecting stdout to its log and
    teeing it back works (each line then carries torchrun's ``[defaultN]:`` prefix). Asked of
    the venv's interpreter (one short run, only for ``--launcher torchrun``)."""
    code = (
        "import importlib.metadata as m, sys\n"
        "try: v = m.version('torch')\nexcept m.PackageNotFoundError: v = ''\n"
        "print(v, '%d.%d' % sys.version_info[:2])"
    )
    try:
        done = subprocess.run(
            [python, "-I", "-c", code], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = done.stdout.split()
    if len(found) != 2 or not found[0].startswith("1."):
        return None
    version, python_minor = found
    if tuple(int(part) for part in python_minor.split(".")) < (3, 11):
        return None
    return (
        f"torch {version} on Python {python_minor}: its torchrun cannot parse its own default "
        "output options there, so its stdout is teed (lines prefixed [defaultN]:)"
    )


def _port(raw: str | None) -> int:
    if raw is None or not raw.isdigit() or not 0 < int(raw) < 65536:
        raise EntryNotRunnable(
            f"MASTER_PORT={raw!r} is not a TCP port (1-65535)", field="MASTER_PORT"
        )
    return int(raw)
