"""The workdir: temporary by default and removed after the job (outputs kept), never shared."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from j2c_server.unpack.errors import ExitCode
from j2c_server.unpack.workdir import MARKER
from tests.unpack.conftest import SmallJob
from tests.unpack.helpers import run_unpack


def job_environment(tmp: Path) -> dict[str, str]:
    env = {**os.environ, "TMPDIR": str(tmp)}
    env.pop("J2C_OUTPUT_DIR", None)
    return env


def test_without_a_workdir_only_the_outputs_are_left_behind(small_job: SmallJob, tmp_path: Path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    done = run_unpack(small_job.publish(), "--paths", "relocate", env=job_environment(tmp))
    assert done.returncode == 0, done.stderr
    (workdir,) = tmp.iterdir()
    assert [p.relative_to(workdir).as_posix() for p in sorted(workdir.rglob("*"))] == [
        "outputs",
        "outputs/result.txt",
    ]
    assert f"outputs stay in {workdir / 'outputs'}" in done.stderr


def test_without_a_workdir_or_outputs_nothing_is_left_behind(small_job: SmallJob, tmp_path: Path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**job_environment(tmp), "J2C_OUTPUT_DIR": str(tmp_path / "elsewhere")}
    done = run_unpack(small_job.publish(), "--paths", "relocate", env=env)
    assert done.returncode == 0, done.stderr
    assert list(tmp.iterdir()) == []
    assert (tmp_path / "elsewhere" / "result.txt").read_text() == "done"


def test_a_workdir_in_use_by_another_job_is_refused(small_job: SmallJob, tmp_path: Path):
    workdir = tmp_path / "shared"
    workdir.mkdir()
    with open(workdir / MARKER, "w") as marker:
        fcntl.flock(marker, fcntl.LOCK_EX)
        done = run_unpack(small_job.publish(), "--workdir", str(workdir))
    assert done.returncode == ExitCode.LOCAL_IO
    assert "in use by another j2c-unpack" in done.stderr


def test_a_workdir_with_someone_elses_files_is_refused(small_job: SmallJob, tmp_path: Path):
    workdir = tmp_path / "home"
    workdir.mkdir()
    (workdir / "thesis.tex").write_text("precious")
    done = run_unpack(small_job.publish(), "--workdir", str(workdir), "--paths", "relocate")
    assert done.returncode == ExitCode.LOCAL_IO
    assert "not made by j2c-unpack" in done.stderr
    assert sorted(p.name for p in workdir.iterdir()) == ["thesis.tex"]
