"""Lab → store → compute container, end to end: a project and its ``--system-site-packages``
venv (made with the image's Python version; a PEP 660 editable of the project with a console
script, and a legacy ``setup.py develop`` editable of a second package in it) are sent with
``j2c submit --scheduler container``; the job runs in a fresh container of the platform image as
another uid, with only its own store files mounted and without the lab's paths.

- The image's numpy is used; a venv that installs its own numpy shadows it: the preflight, run
  in a lab container of the same image, warns, and ``j2c-unpack`` says so in the job's log.
- A notebook entry runs in a kernel of the venv and the executed notebook comes back. The small
  platform image has no nbclient or ipykernel (Debian's cannot be installed by debootstrap: its
  resolver misses virtual packages), so the test's venv installs them from the package index, as
  a user would (pyzmq is then a compiled package the image does not have).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.frontends import RunJ2C
from tests.support.podman import Podman

# The image's interpreter: Debian bookworm's python3 (same major.minor as the image's).
LAB_PYTHON = Path("/usr/bin/python3")

TRAIN = """\
import importlib.metadata, os, subprocess, sys
import numpy, adatool, oldtool
print("numpy", numpy.__version__, "from", numpy.__file__.split("/dist-packages")[0], flush=True)
print("adatool", importlib.metadata.version("adatool"), adatool.__file__.startswith(os.getcwd()))
print("oldtool", importlib.metadata.version("oldtool"), oldtool.__file__.startswith(os.getcwd()))
print(subprocess.run(["ada-hello"], capture_output=True, text=True, check=True).stdout.strip())
print("uid", os.getuid(), "home", os.environ["HOME"], flush=True)
open(os.path.join(os.environ["J2C_OUTPUT_DIR"], "result.txt"), "w").write("42")
"""


NOTEBOOK = {
    "cells": [
        {
            "cell_type": "code",
            "id": "c1",
            "metadata": {},
            "execution_count": None,
            "outputs": [],
            "source": "import numpy, oldtool\nprint('nb numpy', numpy.__version__, oldtool.VALUE)",
        },
        {
            "cell_type": "code",
            "id": "c2",
            "metadata": {},
            "execution_count": None,
            "outputs": [],
            "source": "6 * 7",
        },
    ],
    "metadata": {},
    "nbformat": 4,
    "nbformat_minor": 5,
}
LAB_SITE = "lib/python3.11/site-packages"
IMAGE_NUMPY = "numpy 1.24.2 from /usr/lib/python3"


def _pip(venv: Path, *args: str) -> None:
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", "--no-index", "--no-build-isolation", *args],
        check=True,
    )


@pytest.fixture
def lab_project(tmp_path: Path) -> Iterator[Path]:
    """``/home/ada-<id>/proj``: a path the job's uid cannot create in the container, so the
    job must relocate it."""
    if not LAB_PYTHON.exists():
        pytest.skip("no /usr/bin/python3 here to make the lab venv with")
    home = Path(f"/home/ada-{uuid.uuid4().hex[:8]}")
    project = home / "proj"
    (project / "src" / "adatool").mkdir(parents=True)
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "adatool"\nversion = "1.0"\n'
        '[project.scripts]\nada-hello = "adatool:hello"\n'
        '[tool.setuptools.packages.find]\nwhere = ["src"]\n'
    )
    (project / "src" / "adatool" / "__init__.py").write_text(
        "def hello():\n    print('hello from ada')\n"
    )
    (project / "train.py").write_text(TRAIN)
    # A second package of the project, installed the legacy way (egg-link, easy-install.pth).
    (project / "legacy").mkdir()
    (project / "legacy" / "setup.py").write_text(
        "from setuptools import setup\n"
        "setup(name='oldtool', version='0.3', py_modules=['oldtool'])\n"
    )
    (project / "legacy" / "oldtool.py").write_text("VALUE = 3\n")
    (project / "analysis.ipynb").write_text(json.dumps(NOTEBOOK))
    venv = project / ".venv"
    subprocess.run([str(LAB_PYTHON), "-m", "venv", "--system-site-packages", str(venv)], check=True)
    _pip(venv, "-e", str(project))
    subprocess.run(
        [str(venv / "bin" / "python"), "setup.py", "-q", "develop", "--no-deps"],
        cwd=project / "legacy",
        check=True,
        capture_output=True,
    )
    assert (venv / LAB_SITE / "oldtool.egg-link").is_file()
    try:
        yield project
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _env(podman: Podman, store: Path) -> dict[str, str]:
    return {
        "J2C_STORAGE__URL": store.as_uri(),
        # The job runs as another uid: the store must be readable by it.
        "J2C_STORAGE__SHARED": "true",
        "J2C_SCHEDULER__CONTAINER__SOCKET": podman.socket,
        "J2C_SCHEDULER__CONTAINER__USER": "1234:1234",
    }


def _submit(
    podman: Podman, run_j2c: RunJ2C, project: Path, store: Path, entry: str
) -> tuple[list[str], str]:
    """The job's output lines (its own and j2c-unpack's), and its id."""
    env = _env(podman, store)
    result = run_j2c(
        "submit",
        entry,
        "--venv-path",
        str(project / ".venv"),
        "--scheduler",
        "container",
        "--image",
        podman.image,
        cwd=project,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    [record] = json.loads(run_j2c("list", "--json", env=env).stdout)
    return (result.stdout + result.stderr).splitlines(), record["id"]


def test_a_lab_project_runs_in_a_fresh_container_as_another_uid(
    podman: Podman, run_j2c: RunJ2C, lab_project: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    out, job_id = _submit(podman, run_j2c, lab_project, store, "train.py")
    assert IMAGE_NUMPY in out  # the image's numpy, through system site
    assert "adatool 1.0 True" in out  # the PEP 660 editable, relocated with the project
    assert "oldtool 0.3 True" in out  # the legacy egg-link editable, relocated too
    assert "hello from ada" in out  # its console script, shebang rewritten
    assert "uid 1234 home /j2c/home" in out
    assert not [line for line in out if "shadows" in line]
    uploaded = store / "jobs" / job_id / "outputs" / "result.txt"
    assert uploaded.read_text() == "42"
    # Written by uid 1234 into the shared store: readable by the server's uid too.
    assert uploaded.stat().st_uid == 1234 and uploaded.stat().st_mode & 0o777 == 0o644


def test_a_notebook_entry_returns_the_executed_notebook(
    podman: Podman, run_j2c: RunJ2C, lab_project: Path, tmp_path: Path
) -> None:
    pip = lab_project / ".venv" / "bin" / "pip"
    installed = subprocess.run(
        # All of their dependencies into the venv: this lab's base has some (pygments) that the
        # image lacks, where the lab and the image are not the same (here they are not).
        [str(pip), "install", "-q", "--ignore-installed", "nbclient", "ipykernel"],
        capture_output=True,
        text=True,
    )
    if installed.returncode != 0 and "No matching distribution" in installed.stderr:
        pytest.skip("the package index is not reachable: no nbclient for the venv")
    assert installed.returncode == 0, installed.stderr[-2000:]
    store = tmp_path / "store"
    out, job_id = _submit(podman, run_j2c, lab_project, store, "analysis.ipynb")
    assert "nb numpy 1.24.2 3" in out  # streamed while it ran
    executed = json.loads((store / "jobs" / job_id / "outputs" / "analysis.ipynb").read_text())
    first, second = executed["cells"]
    assert "".join(first["outputs"][0]["text"]) == "nb numpy 1.24.2 3\n"
    assert "".join(second["outputs"][0]["data"]["text/plain"]) == "42"  # str or list of lines
    assert second["execution_count"] == 2


def _lab_preflight(podman: Podman, project: Path) -> list[dict[str, str]]:
    """The preflight's warnings, computed in a lab container of the platform image (whose base
    interpreter has the image's numpy, as the lab's would). The image holds j2c's compute side
    only: the lab side is this checkout's, mounted, with pathspec (pure Python) beside it."""
    import pathspec

    code = (
        "import sys; sys.path[:0] = ['/lab', '/opt/j2c/lib']; sys.path.append('/lab-deps')\n"
        "from j2c_server.pack.models import PackSpec\n"
        "from j2c_server.pack.plan import preflight\n"
        f"plan = preflight(PackSpec(code_path={str(project)!r}, call_path='train.py', "
        f"venv_path={str(project / '.venv')!r}))\n"
        "print(plan.model_dump_json())\n"
    )
    home = project.parent
    checkout = Path(__file__).resolve().parents[2] / "j2c_server"
    ran = subprocess.run(
        [
            "podman",
            "run",
            "--rm",
            "-v",
            f"{home}:{home}",
            "-v",
            f"{checkout}:/lab/j2c_server:ro",
            "-v",
            f"{Path(pathspec.__file__).parent}:/lab-deps/pathspec:ro",
            podman.image,
            "python3",
            "-I",
            "-c",
            code,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ},
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    warnings: list[dict[str, str]] = json.loads(ran.stdout)["warnings"]
    return warnings


def test_a_venv_that_shadows_the_images_numpy_is_warned_at_build_and_in_the_log(
    podman: Podman, run_j2c: RunJ2C, lab_project: Path, tmp_path: Path
) -> None:
    fake = tmp_path / "numpy-src"
    (fake / "numpy").mkdir(parents=True)
    (fake / "numpy" / "__init__.py").write_text("__version__ = '99.0'\n")
    (fake / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "numpy"\nversion = "99.0"\n'
    )
    _pip(lab_project / ".venv", str(fake))
    assert [
        w["path"] for w in _lab_preflight(podman, lab_project) if w["code"] == "shadowed_package"
    ] == ["numpy"]
    out, _ = _submit(podman, run_j2c, lab_project, tmp_path / "store", "train.py")
    assert IMAGE_NUMPY not in out
    assert [line for line in out if line.startswith("numpy 99.0 from ")]  # the venv's copy
    assert (
        "j2c: python: the venv's numpy 99.0 shadows the image's numpy 1.24.2: the job imports "
        "the venv's copy" in out
    )
