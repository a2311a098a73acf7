"""The command line: light imports (a job's start-up waits for them), ``--``, ``--no-run``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.unpack.conftest import SmallJob
from tests.unpack.helpers import run_unpack

SERVER_SIDE = ("jupyter_server", "tornado", "aiobotocore", "botocore", "httpx")


def imported_modules(*args: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "j2c_server.unpack", *args],
        capture_output=True,
        text=True,
        check=False,
    )
    return {
        line.split("|")[-1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and not line.endswith("package")
    }


def test_help_answers_without_loading_pydantic_or_server_code():
    modules = imported_modules("--help")
    assert "j2c_server.unpack.errors" in modules  # what __main__ imports at the top
    assert not {m for m in modules if m.split(".")[0] in ("pydantic", *SERVER_SIDE)}


def test_a_whole_job_loads_no_server_side_or_s3_code(small_job: SmallJob, tmp_path: Path):
    modules = imported_modules(small_job.publish(), "--workdir", str(tmp_path / "job"))
    assert "j2c_server.unpack.run" in modules  # the job did run
    assert not {m for m in modules if m.split(".")[0] in SERVER_SIDE}
    assert "j2c_server.storage" not in modules
    assert not {m for m in modules if m.startswith("j2c_server.pack")}  # the lab side's


def test_no_run_prepares_everything_and_runs_nothing(small_job: SmallJob, tmp_path: Path):
    workdir = tmp_path / "job"
    done = run_unpack(
        small_job.publish(), "--workdir", str(workdir), "--paths", "relocate", "--no-run"
    )
    assert done.returncode == 0, done.stderr
    assert "USER CODE RAN" not in done.stdout
    assert (workdir / "code" / "job.py").is_file()
    assert (workdir / "venv" / "bin" / "python").exists()
