"""``j2c usage`` over a fixture of records in a ``file://`` store, run as the real command:
the totals per user, scheduler and day are the hand-computed ones below, the window leaves old
days out, a record that does not parse is skipped with a note, a bad --since names the option.

The fixture (hours are GPU-hours = GPUs x run time; waits are queue waits in seconds):

======  =====  ======  =====  =========  ====  ======  ==========
job     day    user    image  scheduler  GPUs  run     status / wait
======  =====  ======  =====  =========  ====  ======  ==========
a1      -2     alice   A      local      2     3600 s  succeeded, 10
a2      -2     alice   A      slurm      1     1800 s  failed, 30
b1      -2     bob     B      slurm      4     900 s   succeeded, 120
b2      -1     bob     B      slurm      1     0       cancelled before it ran
b3      -1     bob     B      slurm      0     60 s    lost, 60
c1      -1     carol   A      local      1     -       start record only (running)
old     -10    alice   A      slurm      8     3600 s  succeeded, 5
======  =====  ======  =====  =========  ====  ======  ==========
"""

from __future__ import annotations

import calendar
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

J2C = str(Path(sys.executable).parent / "j2c")
DAY = 86400


def _noon(days_ago: int) -> float:
    today = time.gmtime()
    noon = calendar.timegm((today.tm_year, today.tm_mon, today.tm_mday, 12, 0, 0))
    return noon - days_ago * DAY


def _record(
    job: str, days_ago: int, user: str, image: str, scheduler: str, gpus: int, **end: Any
) -> dict[str, Any]:
    created = _noon(days_ago)
    record: dict[str, Any] = {
        "kind": "start",
        "format_version": 1,
        "job_id": job,
        "user": user,
        "frontend": "rest",
        "project": "proj",
        "entry": "train.py",
        "image": image,
        "scheduler": scheduler,
        "resources": {"gpus": gpus},
        "created_at": created,
        "submitted_at": created + 5,
        "j2c_version": "test",
        "recorded_at": created + 5,
    }
    if end:
        run = end.pop("run", 0.0)
        wait = end.pop("wait", None)
        record.update(kind="end", run_s=run, gpu_seconds=gpus * run, queue_wait_s=wait, **end)
    return record


FIXTURE = [
    _record("a1", 2, "alice", "A", "local", 2, status="succeeded", run=3600, wait=10),
    _record("a2", 2, "alice", "A", "slurm", 1, status="failed", run=1800, wait=30),
    _record("b1", 2, "bob", "B", "slurm", 4, status="succeeded", run=900, wait=120),
    _record("b2", 1, "bob", "B", "slurm", 1, status="cancelled"),
    _record("b3", 1, "bob", "B", "slurm", 0, status="lost", run=60, wait=60),
    _record("c1", 1, "carol", "A", "local", 1),
    _record("old", 10, "alice", "A", "slurm", 8, status="succeeded", run=3600, wait=5),
]


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    for record in FIXTURE:
        day = time.strftime("%Y/%m/%d", time.gmtime(record["created_at"]))
        path = root / "usage" / day / f"{record['job_id']}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record))
    stray = root / "usage" / time.strftime("%Y/%m/%d", time.gmtime(_noon(1))) / "stray.json"
    stray.write_text('{"not": "a usage record"}')
    return root


def _usage(store: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [J2C, "usage", "--store", store.as_uri(), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _groups(store: Path, *args: str) -> list[dict[str, Any]]:
    done = _usage(store, "--json", *args)
    assert done.returncode == 0, done.stderr
    assert "1 usage records could not be read" in done.stderr
    groups: list[dict[str, Any]] = json.loads(done.stdout)["groups"]
    return groups


def _row(group: str, jobs: int, failed: int, cancelled: int, running: int, hours: float,
         wait: float | None) -> dict[str, Any]:  # fmt: skip
    return {
        "group": group,
        "jobs": jobs,
        "failed": failed,
        "cancelled": cancelled,
        "running": running,
        "gpu_hours": hours,
        "median_queue_wait_s": wait,
    }


def test_by_user_over_the_last_week(store: Path) -> None:
    assert _groups(store, "--since", "7d", "--by", "user") == [
        _row("alice", 2, 1, 0, 0, 2.5, 20.0),  # 2 x 1 h + 1 x 0.5 h; median of 10, 30
        _row("bob", 3, 1, 1, 0, 1.0, 90.0),  # 4 x 0.25 h; lost is a failure; 120, 60
        _row("carol", 1, 0, 0, 1, 0.0, None),
    ]


def test_by_scheduler_and_by_day(store: Path) -> None:
    assert _groups(store, "--by", "scheduler") == [
        _row("local", 2, 0, 0, 1, 2.0, 10.0),  # most GPU-hours first
        _row("slurm", 4, 2, 1, 0, 1.5, 60.0),  # waits 30, 120, 60
    ]
    assert _groups(store, "--by", "day") == [
        _row(time.strftime("%Y-%m-%d", time.gmtime(_noon(2))), 3, 1, 0, 0, 3.5, 30.0),
        _row(time.strftime("%Y-%m-%d", time.gmtime(_noon(1))), 3, 1, 1, 1, 0.0, 60.0),
    ]


def test_a_longer_window_takes_the_old_day_in(store: Path) -> None:
    by_user = {g["group"]: g for g in _groups(store, "--since", "30d")}
    assert by_user["alice"]["jobs"] == 3
    assert by_user["alice"]["gpu_hours"] == 10.5
    assert by_user["alice"]["median_queue_wait_s"] == 10.0  # of 5, 10, 30
    by_image = {g["group"]: g["jobs"] for g in _groups(store, "--since", "2w", "--by", "image")}
    assert by_image == {"A": 4, "B": 3}


def test_the_table(store: Path) -> None:
    done = _usage(store, "--by", "user")
    assert done.returncode == 0, done.stderr
    print(done.stdout)  # the sample in the docs
    assert done.stdout.splitlines() == [
        "USER   JOBS  FAILED  CANCELLED  RUNNING  GPU-HOURS  MEDIAN WAIT",
        "alice     2       1          0        0       2.50         20 s",
        "bob       3       1          1        0       1.00   1 min 30 s",
        "carol     1       0          0        1       0.00            -",
        "total     6       2          1        1       3.50",
    ]


def test_a_bad_window_names_the_option(store: Path) -> None:
    done = _usage(store, "--since", "a week")
    assert done.returncode != 0
    assert "--since" in done.stderr and "7d" in done.stderr
