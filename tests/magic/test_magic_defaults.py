"""The magic's notebook defaults, cell files and option parsing (in-process, no kernel)."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest
from IPython.core.error import UsageError

from j2c_server.cli.submit import submit
from j2c_server.errors import InvalidInput
from j2c_server.magic import notebook_defaults, notebook_path, parse, write_cell


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "notebooks").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / "notebooks" / "explore.ipynb").write_text("{}")
    return root


def test_notebook_comes_from_session_name(project: Path) -> None:
    notebooks = project / "notebooks"
    found = notebook_path(notebooks, {"__session__": "explore.ipynb"}, {})
    assert found == notebooks / "explore.ipynb"


def test_notebook_falls_back_to_jpy_session_name(project: Path) -> None:
    path = project / "notebooks" / "explore.ipynb"
    assert notebook_path(project, {}, {"JPY_SESSION_NAME": str(path)}) == path


def test_a_console_session_has_no_notebook(project: Path) -> None:
    assert notebook_path(project, {"__session__": "console-1"}, {}) is None


def test_defaults_ship_the_project_around_the_notebook(project: Path) -> None:
    defaults = notebook_defaults(project / "notebooks", {"__session__": "explore.ipynb"}, {})
    assert defaults["code_path"] == str(project)
    assert defaults["call_path"] == str(project / "notebooks" / "explore.ipynb")


def test_defaults_ship_the_kernels_venv_when_it_runs_in_one(project: Path) -> None:
    in_venv = sys.prefix != sys.base_prefix
    expected = str(Path(sys.prefix).resolve()) if in_venv else None
    assert notebook_defaults(project, {}, {}).get("venv_path") == expected


def test_cell_file_lives_in_the_project_and_is_named_by_content(project: Path) -> None:
    first = write_cell(project, project / "notebooks", "print(1)\n")
    again = write_cell(project, project / "notebooks", "print(1)\n")
    other = write_cell(project, project / "notebooks", "print(2)\n")
    assert first == again != other
    assert first.parent == project / ".j2c" / "cells"
    assert first.name.startswith("cell-") and first.suffix == ".py"


def test_cell_file_runs_in_the_notebooks_folder(
    project: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (project / "notebooks" / "data.txt").write_text("found")
    cell = write_cell(project, project / "notebooks", "RESULT = open('data.txt').read()\n")
    monkeypatch.chdir(tmp_path)
    assert runpy.run_path(str(cell))["RESULT"] == "found"


def test_cell_outside_the_project_is_refused(project: Path, tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="outside the project"):
        write_cell(project, tmp_path, "print(1)\n")


def test_magic_options_are_the_clis(project: Path) -> None:
    ctx = parse(submit, "%j2c submit", ["--gpus", "2", "train.py", "--", "--lr", "1"])
    assert ctx is not None
    assert ctx.params["gpus"] == 2
    assert ctx.meta["j2c.script_args"] == ["--lr", "1"]


def test_bad_magic_option_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="--gpus"):
        parse(submit, "%j2c submit", ["--gpus", "many"])
