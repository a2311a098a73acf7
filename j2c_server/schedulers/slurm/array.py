"""A sweep as one Slurm array job: its ``array`` field, its tasks' output files, and how one
task's record is found in what slurmrestd returns for the array.

Measured on Slurm 22.05 (REST v0.0.38): ``GET /job/{array id}`` lists every task Slurm still
knows: one record per task that has started (``array_task_id`` set; the last task keeps the
array's own job id), plus one record for the tasks still pending together
(``array_task_id`` unset, ``array_task_string`` such as ``"2-5%2"``). ``GET /job/{id}_{task}``
of a pending task answers "Unable to find", so a task's state is always read from the array's
list. A task cancelled while pending leaves the list altogether: an array that is still known
without the task means the task was removed before it started.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

TASK_ENV = "SLURM_ARRAY_TASK_ID"
TASK_OUTPUT = "task-%a.log"  # Slurm puts the task's index in place of %a
_RANGE_RE = re.compile(r"^(\d+)(?:-(\d+))?(?::(\d+))?$")


def array_field(size: int, max_parallel: int | None) -> str:
    """``0-5`` for six tasks, ``0-5%2`` when at most two may run at once."""
    if size < 1:
        raise ValueError("an array has at least one task")
    throttle = f"%{max_parallel}" if max_parallel else ""
    return f"0-{size - 1}{throttle}"


def task_output(run_dir: Path, task: int) -> Path:
    return run_dir / TASK_OUTPUT.replace("%a", str(task))


def task_handle_id(array_id: str, task: int) -> str:
    return f"{array_id}_{task}"


def split_task_id(slurm_id: str) -> tuple[str, int | None]:
    """``"41_3"`` → ``("41", 3)``; a plain job id → ``(id, None)``."""
    array_id, sep, task = slurm_id.partition("_")
    return array_id, int(task) if sep else None


def pending_tasks(text: object) -> set[int]:
    """The tasks of ``array_task_string`` (``"2-5%2"``, ``"2,4-5"``, ``"0-15:4"``)."""
    if not isinstance(text, str) or not text:
        return set()
    tasks: set[int] = set()
    for part in text.split("%", 1)[0].split(","):
        match = _RANGE_RE.match(part.strip())
        if match is None:
            continue
        first = int(match.group(1))
        last = int(match.group(2) or first)
        tasks.update(range(first, last + 1, int(match.group(3) or 1)))
    return tasks


def task_record(jobs: list[dict[str, Any]], task: int) -> dict[str, Any] | None:
    """The record Slurm keeps for ``task`` among the array's ``jobs``: its own once started,
    else the pending tasks' shared one; None when the array lists it nowhere."""
    for job in jobs:
        if job.get("array_task_id") == task:
            return job
    for job in jobs:
        if job.get("array_task_id") is None and task in pending_tasks(job.get("array_task_string")):
            return job
    return None
