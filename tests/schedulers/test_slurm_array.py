"""How an array task's record is found among what slurmrestd lists for its array (the shapes
measured on the real Slurm of the suite: see j2c_server/schedulers/slurm/array.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from j2c_server.schedulers.slurm.array import (
    array_field,
    pending_tasks,
    split_task_id,
    task_output,
    task_record,
)


@pytest.mark.parametrize(
    ("text", "tasks"),
    [
        ("2-5%2", {2, 3, 4, 5}),
        ("2,4-5", {2, 4, 5}),
        ("0-6:3", {0, 3, 6}),
        ("7", {7}),
        ("", set()),
        (None, set()),
        ("junk,3", {3}),
    ],
)
def test_the_pending_tasks_string_is_read_as_slurm_writes_it(text: object, tasks: set[int]) -> None:
    assert pending_tasks(text) == tasks


def test_a_task_is_its_own_record_once_started_else_the_pending_one() -> None:
    listed: list[dict[str, Any]] = [
        {"job_id": 5, "array_task_id": None, "array_task_string": "4-5%2", "job_state": "PENDING"},
        {"job_id": 9, "array_task_id": 3, "job_state": "RUNNING"},
        {"job_id": 6, "array_task_id": 0, "job_state": "COMPLETED"},
    ]
    assert task_record(listed, 3) is listed[1]
    assert task_record(listed, 0) is listed[2]
    assert task_record(listed, 5) is listed[0]
    assert task_record(listed, 1) is None  # removed before it started


def test_names_of_the_array_and_its_tasks() -> None:
    assert array_field(6, 2) == "0-5%2"
    assert array_field(6, None) == "0-5"
    with pytest.raises(ValueError):
        array_field(0, None)
    assert split_task_id("41_3") == ("41", 3)
    assert split_task_id("41") == ("41", None)
    assert task_output(Path("/jobs/ab"), 3) == Path("/jobs/ab/task-3.log")
