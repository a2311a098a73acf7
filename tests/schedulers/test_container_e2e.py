"""Lab → store → compute container, end to end: a project and its ``--system-site-packages``
venv (made with the image's Python version, a PEP 660 editable of the project with a console
script) are sent with ``j2c submit --scheduler container``; the job runs in a fresh container of
the platform image as another uid, with only the store mounted and without the lab's paths."""

from __future__ import annotations

import json
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
import numpy, adatool
print("numpy from", numpy.__file__.split("/dist-packages")[0], flush=True)
print("adatool", importlib.metadata.version("adatool"), adatool.__file__.startswith(os.getcwd()))
print(subprocess.run(["ada-hello"], capture_output=True, text=True, check=True).stdout.strip())
print("uid", os.getuid(), "home", os.environ["HOME"], flush=True)
open(os.path.join(os.environ["J2C_OUTPUT_DIR"], "result.txt"), "w").write("42")
"""


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
    venv = project / ".venv"
    subprocess.run([str(LAB_PYTHON), "-m", "venv", "--system-site-packages", str(venv)], check=True)
    subprocess.run(
        [
            str(venv / "bin" / "pip"),
            "install",
            "-q",
            "--no-index",
            "--no-build-isolation",
            "-e",
            str(project),
        ],
        check=True,
    )
    try:
        yield project
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_a_lab_project_runs_in_a_fresh_container_as_another_uid(
    podman: Podman, run_j2c: RunJ2C, lab_project: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    env = {
        "J2C_STORAGE__URL": store.as_uri(),
        # The job runs as another uid: the store must be readable by it.
        "J2C_STORAGE__SHARED": "true",
        "J2C_SCHEDULER__CONTAINER__SOCKET": podman.socket,
        "J2C_SCHEDULER__CONTAINER__USER": "1234:1234",
    }
    result = run_j2c(
        "submit",
        "train.py",
        "--venv-path",
        str(lab_project / ".venv"),
        "--scheduler",
        "container",
        "--image",
        podman.image,
        cwd=lab_project,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout.splitlines()
    assert "numpy from /usr/lib/python3" in out  # the image's numpy, through system site
    assert "adatool 1.0 True" in out  # the editable, relocated with the project
    assert "hello from ada" in out  # its console script, shebang rewritten
    assert "uid 1234 home /j2c/home" in out
    [record] = json.loads(run_j2c("list", "--json", env=env).stdout)
    assert (store / "jobs" / record["id"] / "outputs" / "result.txt").read_text() == "42"
