"""One registry for every front end: a job submitted by the CLI is a job of the server's API."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.frontends import RunJ2C


async def test_a_job_from_the_cli_is_listed_by_the_server(
    jp_fetch: Any, j2c_data_dir: Path, run_j2c: RunJ2C, cli_project: Path, cli_venv: Path
) -> None:
    result = run_j2c(
        *("submit", "train.py", "--venv-path", str(cli_venv), "--json"),
        cwd=cli_project,
        env={"J2C_DATA_DIR": str(j2c_data_dir)},
    )
    job_id = json.loads(result.stdout)["id"]
    response = await jp_fetch("j2c", "api", "jobs", job_id)
    job = json.loads(response.body)
    assert job["status"] == "succeeded"
    assert job["request"]["call_path"] == str(cli_project / "train.py")
