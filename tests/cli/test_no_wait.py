"""``j2c submit --no-wait``: the command returns at once and the detached watcher takes the job
over at once. It used to wait for the CLI's lease to expire (~10 s): the CLI stopped while its
driver was taking the lease, and nothing gave it back."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

from tests.support.frontends import RunJ2C

LIMIT_S = 2.0


def _status(registry: Path, job_id: str) -> str:
    with sqlite3.connect(registry) as conn:  # read directly: a j2c command could drive it
        row = conn.execute("SELECT status FROM jobs WHERE id = ?", (job_id,)).fetchone()
    return str(row[0])


def test_a_no_wait_job_is_submitted_within_two_seconds(
    run_j2c: RunJ2C, cli_project: Path, tmp_path: Path
) -> None:
    registry = tmp_path / "j2c-data" / "registry.sqlite3"
    for round_ in range(3):  # the lease is taken at any moment of the command's short life
        (cli_project / "train.py").write_text(f"print('round {round_}')\n")
        sent = run_j2c("submit", "train.py", "--no-venv", "--no-wait", "--json", cwd=cli_project)
        assert sent.returncode == 0, sent.stderr
        started = time.monotonic()  # the command has returned: the watcher has the job now
        job_id = json.loads(sent.stdout)["id"]
        while _status(registry, job_id) in ("pending", "packing", "uploading"):
            assert time.monotonic() - started < 15, "never submitted"
            time.sleep(0.05)
        assert time.monotonic() - started < LIMIT_S, (
            f"round {round_}: submitted only after {time.monotonic() - started:.1f} s"
        )
