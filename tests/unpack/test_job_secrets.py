"""j2c-unpack takes the job's credentials from the file ``$J2C_SECRETS_FILE`` names (the way
every backend but Kubernetes and local hands them over, never in the job's spec), and a
manifest given as ``env:NAME``. Real j2c-unpack, real store."""

from __future__ import annotations

import json
import os
from pathlib import Path

from j2c_server.unpack.errors import ExitCode
from tests.support.projects import write
from tests.unpack.helpers import publish_project, run_unpack

JOB = """\
import os
print("TOKEN", os.environ.get("HF_TOKEN"))
print("LEFT", sorted(k for k in os.environ if k in ("J2C_SECRETS_FILE", "J2C_MANIFEST_URL")))
"""


def test_the_credentials_file_reaches_the_job_and_names_its_manifest(
    tmp_path: Path, store: Path
) -> None:
    write(tmp_path / "project" / "job.py", JOB)
    uri = publish_project(tmp_path / "project", store, "job.py")
    secrets = tmp_path / "secrets.json"
    secrets.write_text(json.dumps({"env": {"HF_TOKEN": "by-reference", "J2C_MANIFEST_URL": uri}}))
    secrets.chmod(0o600)

    done = run_unpack(
        "env:J2C_MANIFEST_URL",
        "--paths",
        "relocate",
        env={**os.environ, "J2C_SECRETS_FILE": str(secrets)},
    )

    assert done.returncode == 0, done.stderr
    assert "TOKEN by-reference" in done.stdout
    assert "LEFT []" in done.stdout  # the file's name and the manifest's URL stay j2c's


def test_a_named_manifest_variable_that_is_not_set_stops_before_anything_runs(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "J2C_MANIFEST_URL"}
    done = run_unpack("env:J2C_MANIFEST_URL", env=env)
    assert done.returncode == ExitCode.MANIFEST, done.stderr
    assert "$J2C_MANIFEST_URL is not set" in done.stderr


def test_a_credentials_file_that_is_not_one_is_refused(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets.json"
    secrets.write_text('{"HF_TOKEN": "flat"}')
    done = run_unpack("file:///none.json", env={**os.environ, "J2C_SECRETS_FILE": str(secrets)})
    assert done.returncode == ExitCode.LOCAL_IO, done.stderr
    assert "is not" in done.stderr and "flat" not in done.stderr
