"""Notebook entry points: executed cell by cell with nbclient in a kernel of the venv.

The test venv is made with ``--system-site-packages`` on the base interpreter, which has neither
nbclient nor ipykernel; they are installed in the test environment's own site-packages. A
``.pth`` file in the test venv adds that folder to the venv's path, so its interpreter can import
them (as a venv with ``pip install nbclient ipykernel`` would, without the download).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sysconfig
from pathlib import Path

import nbformat
import pytest

from j2c_server.unpack.errors import ExitCode
from tests.support.projects import make_venv, site_packages, write
from tests.unpack.helpers import UNPACK, publish_project, run_unpack


def notebook(*cells: str) -> str:
    return json.dumps(
        {
            "cells": [
                {
                    "id": f"cell-{index}",
                    "cell_type": "code",
                    "execution_count": None,
                    "metadata": {},
                    "outputs": [],
                    "source": source,
                }
                for index, source in enumerate(cells)
            ],
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}},
            "nbformat": 4,
            "nbformat_minor": 5,
        }
    )


@pytest.fixture(scope="module")
def notebook_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = make_venv(tmp_path_factory.mktemp("nb") / "venv")
    write(site_packages(venv) / "jupyter-from-tests.pth", sysconfig.get_paths()["purelib"] + "\n")
    return venv


def publish_notebook(tmp_path: Path, venv: Path, *cells: str, args: list[str] | None = None) -> str:
    project = tmp_path / "lab" / "project"
    write(project / "analysis.ipynb", notebook(*cells))
    return publish_project(
        project, tmp_path / "store", "analysis.ipynb", venv=venv, args=args or []
    )


def test_notebook_cells_run_in_the_venv_with_the_job_arguments(notebook_venv: Path, tmp_path: Path):
    uri = publish_notebook(
        tmp_path,
        notebook_venv,
        "import sys\nprint('prefix', sys.prefix)",
        "print('argv', sys.argv[1:])",
        "40 + 2",
        args=["--epochs", "2"],
    )
    workdir = tmp_path / "job"
    done = run_unpack(uri, "--workdir", str(workdir), "--paths", "relocate", user_args=["--x"])
    assert done.returncode == 0, done.stderr
    assert f"prefix {workdir / 'venv'}" in done.stdout
    assert "argv ['--epochs', '2', '--x']" in done.stdout
    assert "42" in done.stdout.splitlines()


def test_the_executed_notebook_is_saved_to_the_output_dir(notebook_venv: Path, tmp_path: Path):
    uri = publish_notebook(tmp_path, notebook_venv, "print('saved output')")
    workdir = tmp_path / "job"
    run_unpack(uri, "--workdir", str(workdir))
    executed = nbformat.read(workdir / "outputs" / "analysis.ipynb", as_version=4)
    assert executed.cells[0].outputs[0].text == "saved output\n"


def test_cell_outputs_stream_while_the_notebook_runs(notebook_venv: Path, tmp_path: Path):
    go = tmp_path / "go"
    uri = publish_notebook(
        tmp_path,
        notebook_venv,
        "print('first cell done', flush=True)",
        "import os, time\n"
        f"deadline = time.time() + 60\nwhile not os.path.exists({str(go)!r}):\n"
        "    assert time.time() < deadline, 'the test never saw the first output'\n"
        "    time.sleep(0.05)\nprint('second cell done')",
    )
    process = subprocess.Popen(
        [*UNPACK, uri, "--workdir", str(tmp_path / "job")], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    assert process.stdout.readline() == "first cell done\n"  # while cell 2 still waits
    go.touch()
    assert process.stdout.readline() == "second cell done\n"
    assert process.wait(timeout=60) == 0


def test_a_failing_cell_fails_the_job_and_stops_the_notebook(notebook_venv: Path, tmp_path: Path):
    uri = publish_notebook(
        tmp_path, notebook_venv, "raise ValueError('bad data')", "print('never runs')"
    )
    workdir = tmp_path / "job"
    done = run_unpack(uri, "--workdir", str(workdir))
    assert done.returncode == 1
    assert "ValueError" in done.stderr and "bad data" in done.stderr
    assert "never runs" not in done.stdout
    executed = nbformat.read(workdir / "outputs" / "analysis.ipynb", as_version=4)
    assert executed.cells[0].outputs[0].ename == "ValueError"


def test_sigterm_interrupts_the_running_cell(notebook_venv: Path, tmp_path: Path):
    uri = publish_notebook(
        tmp_path,
        notebook_venv,
        "import time\ntry:\n    print('training', flush=True)\n    time.sleep(120)\n"
        "except KeyboardInterrupt:\n    print('checkpoint saved', flush=True)\n    raise",
        "print('never runs')",
    )
    process = subprocess.Popen(
        [*UNPACK, uri, "--workdir", str(tmp_path / "job")], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    assert process.stdout.readline() == "training\n"
    process.send_signal(signal.SIGTERM)
    rest = process.stdout.read()
    assert process.wait(timeout=60) == 128 + signal.SIGTERM
    assert "checkpoint saved" in rest and "never runs" not in rest


def test_a_venv_without_nbclient_gets_a_clear_error(tmp_path: Path):
    uri = publish_notebook(tmp_path, make_venv(tmp_path / "plain-venv"), "print('hi')")
    done = run_unpack(uri, "--workdir", str(tmp_path / "job"))
    assert done.returncode == ExitCode.ENTRY
    said = (
        "j2c: notebook: cannot run analysis.ipynb: the notebook runner needs nbclient and "
        "ipykernel; the venv (and the Python under it) lacks nbclient and ipykernel\n"
    )
    assert said in done.stderr
    assert "j2c: hint: install nbclient and ipykernel into the venv (or the image)" in done.stderr


def test_the_notebook_runner_tags_its_lines_and_keeps_the_tag_from_the_kernel(
    notebook_venv: Path, tmp_path: Path
):
    """Given a tag, the runner's own lines carry it; the notebook's code does not see it."""
    code = "import os; print('tag in kernel:', os.environ.get('J2C_LINE_TAG'))"
    uri = publish_notebook(tmp_path, notebook_venv, code)
    env = {**os.environ, "J2C_LINE_TAG": "0" * 12}
    done = run_unpack(uri, "--workdir", str(tmp_path / "job"), env=env)
    assert done.returncode == 0, done.stderr
    assert "tag in kernel: None" in done.stdout
    assert "j2c[000000000000] info notebook: cell 1 of 1" in done.stderr
    assert "j2c: " not in done.stderr  # every j2c line tagged, j2c-unpack's and the runner's
