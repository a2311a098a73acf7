"""j2c-unpack end to end on a real lab project: packed by the packer, its folders moved away,
then unpacked elsewhere (relocate) or at its original paths, and run."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.unpack.conftest import PublishedLab
from tests.unpack.helpers import run_unpack


def report(stdout: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    return result


@dataclass(frozen=True)
class Relocated:
    """One relocated run of the lab job, shared by the tests that read its results."""

    workdir: Path
    done: subprocess.CompletedProcess[str]
    seen: dict[str, Any]

    @property
    def venv(self) -> Path:
        return self.workdir / "code" / ".venv"


@pytest.fixture(scope="module")
def relocated(published_lab: PublishedLab, tmp_path_factory: pytest.TempPathFactory) -> Relocated:
    workdir = tmp_path_factory.mktemp("relocated") / "job"
    done = run_unpack(
        published_lab.manifest_uri,
        "--workdir",
        str(workdir),
        "--paths",
        "relocate",
        user_args=["--lr", "0.1", "--help", "3"],
    )
    assert done.stdout, done.stderr
    return Relocated(workdir, done, report(done.stdout))


def test_relocated_job_runs_with_the_venv_at_its_new_path(relocated: Relocated):
    assert relocated.seen["prefix"] == str(relocated.venv)
    assert relocated.seen["virtual_env"] == str(relocated.venv)


def test_relocated_job_imports_a_compiled_package_from_the_venv(relocated: Relocated):
    assert relocated.seen["numpy"].startswith(str(relocated.venv / "lib"))
    assert relocated.seen["numpy_sum"] == 45


def test_relocated_job_imports_editable_packages_from_the_code_layer(relocated: Relocated):
    code = relocated.workdir / "code"
    assert relocated.seen["mylib"] == str(code / "src" / "mylib" / "__init__.py")  # .pth
    assert relocated.seen["flatpkg"] == str(  # __editable__ finder
        code / "libs" / "flatpkg" / "flatpkg" / "__init__.py"
    )


def test_relocated_job_calls_a_console_script_of_the_venv(relocated: Relocated):
    assert relocated.seen["hello"] == f"hello from {relocated.venv}"


def test_relocated_venv_keeps_no_old_path(relocated: Relocated, published_lab: PublishedLab):
    venv = relocated.venv
    site = next((venv / "lib").glob("python*/site-packages"))
    rewritten = [venv / "pyvenv.cfg", *(venv / "bin").iterdir(), *site.glob("*.pth")]
    rewritten += [*site.glob("__editable__*finder.py"), *site.glob("*.dist-info/direct_url.json")]
    old = str(published_lab.project.parent).encode()
    old_url = old.replace(b" ", b"%20")
    for path in rewritten:
        if path.is_file() and not path.is_symlink():
            assert old not in path.read_bytes() and old_url not in path.read_bytes(), path


def test_exit_code_of_the_entry_point_comes_back(relocated: Relocated):
    assert relocated.done.returncode == 3


def test_manifest_args_then_command_line_args_reach_the_entry_point(relocated: Relocated):
    assert relocated.seen["args"] == ["--epochs=1", "--lr", "0.1", "--help", "3"]


def test_job_runs_in_the_manifest_workdir_with_an_output_dir(relocated: Relocated):
    assert relocated.seen["cwd"] == str(relocated.workdir / "code")
    assert relocated.seen["output_dir"] == str(relocated.workdir / "outputs")
    assert (relocated.workdir / "outputs").is_dir()


def test_each_stage_reports_its_duration(relocated: Relocated):
    for stage in ("downloading", "extracting", "relocating", "running"):
        assert any(
            line.startswith(f"j2c: {stage}: ") and line.endswith(" s")
            for line in relocated.done.stderr.splitlines()
        ), stage


def test_original_mode_restores_code_and_venv_at_their_original_paths(
    original_paths_free: PublishedLab, tmp_path: Path
):
    lab = original_paths_free
    done = run_unpack(lab.manifest_uri, "--workdir", str(tmp_path / "job"), "--paths", "original")
    assert done.returncode == 0, done.stderr
    seen = report(done.stdout)
    assert seen["prefix"] == str(lab.venv)
    assert seen["mylib"] == str(lab.project / "src" / "mylib" / "__init__.py")
    assert seen["hello"] == f"hello from {lab.venv}"
    assert "(original paths)" in done.stderr


def test_original_mode_relocates_when_an_original_path_is_taken(
    original_paths_free: PublishedLab, tmp_path: Path
):
    lab = original_paths_free
    lab.project.mkdir(parents=True)
    (lab.project / "someone-elses.txt").write_text("keep me")
    workdir = tmp_path / "job"
    done = run_unpack(lab.manifest_uri, "--workdir", str(workdir))
    assert done.returncode == 0, done.stderr
    assert report(done.stdout)["prefix"] == str(workdir / "code" / ".venv")
    assert f"{lab.project} is not empty" in done.stderr
    assert os.listdir(lab.project) == ["someone-elses.txt"]


def test_a_restarted_job_reuses_its_verified_blobs(published_lab: PublishedLab, tmp_path: Path):
    workdir = tmp_path / "job"
    options = ("--workdir", str(workdir), "--paths", "relocate")
    run_unpack(published_lab.manifest_uri, *options)
    again = run_unpack(published_lab.manifest_uri, *options)
    assert again.returncode == 0, again.stderr
    assert "0 B fetched, 2 reused" in again.stderr
