"""A pending Slurm job's place in its partition's queue, counted from slurmrestd's job list in
either of its shapes (v0.0.38's plain numbers, v0.0.39+'s ``{"set", "number"}``)."""

from __future__ import annotations

from typing import Any

import pytest

from j2c_server.schedulers.slurm.state import jobs_ahead, place_words


def job(job_id: int, priority: int, *, state: Any = "PENDING", partition: str = "gpu",
        submitted: int = 100, new_shape: bool = False) -> dict[str, Any]:  # fmt: skip
    if new_shape:
        return {
            "job_id": job_id,
            "job_state": [state],
            "partition": partition,
            "priority": {"set": True, "infinite": False, "number": priority},
            "submit_time": {"set": True, "number": submitted},
        }
    return {"job_id": job_id, "job_state": state, "partition": partition,
            "priority": priority, "submit_time": submitted}  # fmt: skip


@pytest.mark.parametrize("new_shape", [False, True])
def test_higher_priority_pending_jobs_of_the_same_partition_are_ahead(new_shape: bool) -> None:
    me = job(10, 500, new_shape=new_shape)
    queue = [
        me,
        job(11, 900, new_shape=new_shape),  # ahead: higher priority, though submitted later
        job(12, 500, submitted=50, new_shape=new_shape),  # ahead: same priority, earlier
        job(13, 500, submitted=100, new_shape=new_shape),  # behind: same, later id
        job(14, 100, new_shape=new_shape),  # behind: lower priority
        job(15, 999, partition="cpu", new_shape=new_shape),  # another partition
        job(16, 999, state="RUNNING", new_shape=new_shape),  # not waiting
    ]
    assert jobs_ahead(me, queue) == 2


def test_a_job_that_does_not_wait_or_shows_no_priority_has_no_place() -> None:
    assert jobs_ahead(job(1, 5, state="RUNNING"), []) is None
    unset = {**job(2, 5), "priority": {"set": False, "number": 0}}
    assert jobs_ahead(unset, [job(3, 9)]) is None


def test_the_place_in_words() -> None:
    assert place_words(0, "gpu") == "next in partition gpu"
    assert place_words(1, "gpu") == "1 job ahead in partition gpu"
    assert place_words(3, "") == "3 jobs ahead in the queue"
