"""A job sent with ``j2c submit`` (a real subprocess, the local scheduler) is accounted to the
OS user and the ``cli`` front end, and the command prints no audit line to its user."""

from __future__ import annotations

import getpass
import json
from pathlib import Path

from j2c_server.jobs.audit import AUDIT_PREFIX
from tests.support.frontends import RunJ2C


def test_a_cli_job_has_a_record_for_the_os_user(
    run_j2c: RunJ2C, cli_project: Path, cli_venv: Path, tmp_path: Path
) -> None:
    done = run_j2c("submit", "train.py", "--venv-path", str(cli_venv), "--json", cwd=cli_project)
    assert done.returncode == 0, done.stderr
    job = json.loads(done.stdout)
    [path] = (tmp_path / "j2c-data" / "store" / "usage").rglob(f"{job['id']}.json")
    usage = json.loads(path.read_text())
    assert usage["kind"] == "end"
    assert (usage["user"], usage["frontend"]) == (getpass.getuser(), "cli")
    assert (usage["project"], usage["entry"], usage["status"]) == (
        "project",
        "train.py",
        "succeeded",
    )
    assert AUDIT_PREFIX not in done.stderr

    shown = run_j2c("usage", "--by", "scheduler", cwd=cli_project)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[1].split()[:3] == ["local", "1", "0"]
