"""A multi-node job on the container engine: N containers of the platform image, one per rank,
on a network of the job's own, made and started together and read as one job.

- **Names.** Rank 0 is the job's container (its handle's id, ``j2c-<hash>``); rank k is
  ``j2c-<hash>-r<k>``. Every rank gets ``J2C_NODE_RANK`` and ``MASTER_ADDR`` = rank 0's name,
  which the network's DNS resolves (``spec.py``); ``j2c-unpack --nodes N`` turns that into the
  conventional variables and torchrun's rendezvous (``unpack/ranks.py``).
- **The network** ``j2c-<hash>-net`` is created before the first rank and removed with the last
  (``scheduler.container.network``, when an operator sets one, is used instead).
- **All or none.** Every rank is created, then every one started; a failure on the way removes
  what was made (the network too) and the submit fails. A retried submit adopts the ranks that
  exist (their key label checked) and makes the rest.
- **One job.** It runs while any rank runs; once a rank fails, the others are stopped (they
  would wait for it at the next collective); it succeeded when every rank did, else it failed
  with the first failing rank's exit code (``multinode.first_failure``). A rank that vanished
  while the job ran (removed outside j2c) makes the job ``lost``.

GPUs: every rank runs on this one machine, so a multi-node job asking for GPUs is refused with
the one that works (one node, N GPUs: torchrun starts a process per GPU).
"""

from __future__ import annotations

from typing import Any

from j2c_server.core.errors import InvalidInput
from j2c_server.schedulers.base import SchedulerState
from j2c_server.schedulers.container.api import EngineClient
from j2c_server.schedulers.container.lifecycle import LABEL_RUNS
from j2c_server.schedulers.container.spec import LABEL_KEY, LABEL_MANAGED_BY
from j2c_server.schedulers.container.status import FINISHED, state_of
from j2c_server.schedulers.multinode import first_failure
from j2c_server.wire.api import JobStatus, Resources


def check_ranks(resources: Resources) -> None:
    """A multi-node request this backend cannot run as asked, refused before anything runs."""
    if resources.nodes > 1 and resources.gpus:
        total = resources.gpus * resources.nodes
        raise InvalidInput(
            f"resources.nodes: the container backend runs all {resources.nodes} ranks on this "
            f"one machine; send it with 1 node and {total} GPUs (torchrun starts a process per "
            "GPU)",
            field="resources.nodes",
        )


def rank_names(job: str, nodes: int) -> list[str]:
    """The containers of a job whose rank 0 is ``job``, in rank order."""
    return [job, *(f"{job}-r{rank}" for rank in range(1, nodes))]


async def make_network(api: EngineClient, name: str, key: str, runs: str) -> None:
    """The job's network (an existing one of this job's key is adopted)."""
    labels = {LABEL_MANAGED_BY: "j2c", LABEL_KEY: key, LABEL_RUNS: runs}
    await api.request(
        "POST", "/networks/create", json={"Name": name, "Labels": labels}, allow=(409,)
    )


async def remove_network(api: EngineClient, name: str) -> None:
    await api.request("DELETE", f"/networks/{name}", allow=(404, 409))


def combined_state(states: list[SchedulerState], ended: list[int | None]) -> SchedulerState:
    """The job's state out of its ranks' (rank order; ``ended``: when each rank's container
    finished, ns, None while it runs); see the module docstring."""
    finished = [s for s in states if s.status.terminal]
    if len(finished) == len(states):
        if all(s.status == JobStatus.succeeded for s in states):
            return SchedulerState(status=JobStatus.succeeded, exit_code=0)
        if any(s.status == JobStatus.cancelled for s in states):
            return SchedulerState(status=JobStatus.cancelled, message="cancelled")
        # The rank that failed first: the others were stopped because of it.
        order = sorted(range(len(states)), key=lambda rank: (ended[rank] or 0, rank))
        code = first_failure([states[rank].exit_code for rank in order])
        failed = next(rank for rank in order if states[rank].exit_code == code)
        why = states[failed].message or f"exit code {code}"
        return SchedulerState(
            status=JobStatus.failed, message=f"{why} on rank {failed}", exit_code=code
        )
    if any(s.status == JobStatus.cancelling for s in states):
        return SchedulerState(status=JobStatus.cancelling, message="stopping every rank")
    running = [s for s in states if s.status == JobStatus.running]
    if running:
        message = next((s.message for s in running if s.message), None)
        return SchedulerState(status=JobStatus.running, message=message)
    return SchedulerState(status=JobStatus.submitted, message="starting")


def ended_badly(infos: list[dict[str, Any]]) -> bool:
    """A rank exited with a failure while another still runs: the others must be stopped."""
    done = [info for info in infos if state_of(info) in FINISHED]
    failed = [info for info in done if (info.get("State") or {}).get("ExitCode") not in (0, None)]
    return bool(failed) and len(done) < len(infos)
