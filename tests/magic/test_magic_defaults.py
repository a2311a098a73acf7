"""The magic's notebook defaults, cell files and option parsing (in-process, no kernel)."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
from IPython.core.error import UsageError

from j2c_server.cli.options import default_venv_note
from j2c_server.cli.submit import submit
from j2c_server.core.errors import InvalidInput
from j2c_server.magic.magics import notebook_defaults, notebook_path, parse, write_cell


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


def make_venv(path: Path, *, system_site: bool) -> Path:
    path.mkdir(parents=True)
    flag = "true" if system_site else "false"
    (path / "pyvenv.cfg").write_text(f"home = /usr/bin\ninclude-system-site-packages = {flag}\n")
    return path


def test_defaults_ship_the_kernels_venv_when_it_lies_in_the_project(project: Path) -> None:
    venv = make_venv(project / "envs" / "py", system_site=False)
    defaults = notebook_defaults(project / "notebooks", {}, {}, kernel_prefix=venv)
    assert defaults["venv_path"] == str(venv.resolve())


def test_a_hub_venv_outside_the_project_is_not_shipped_and_the_reason_says_so(
    project: Path, tmp_path: Path
) -> None:
    # Behind JupyterHub the kernel's sys.prefix is the hub's own venv (not --system-site-packages).
    hub = make_venv(tmp_path / "hub-venv", system_site=False)
    defaults = notebook_defaults(project / "notebooks", {}, {}, kernel_prefix=hub)
    assert "venv_path" not in defaults
    note = default_venv_note(defaults, {})
    assert note is not None and str(hub.resolve()) in note and "system-site-packages" in note


def test_the_projects_venv_beats_a_kernel_venv_outside_it(project: Path, tmp_path: Path) -> None:
    own = make_venv(project / ".venv", system_site=True)
    hub = make_venv(tmp_path / "hub-venv", system_site=False)
    defaults = notebook_defaults(project / "notebooks", {}, {}, kernel_prefix=hub)
    assert defaults["venv_path"] == str(own.resolve())


def test_a_system_site_packages_kernel_venv_outside_the_project_is_shipped(
    project: Path, tmp_path: Path
) -> None:
    thin = make_venv(tmp_path / "thin", system_site=True)
    defaults = notebook_defaults(project / "notebooks", {}, {}, kernel_prefix=thin)
    assert defaults["venv_path"] == str(thin.resolve())


def test_the_magic_and_the_ui_route_share_one_rule(project: Path, tmp_path: Path) -> None:
    from j2c_server.jobs.send.proposal import send_defaults

    notebook = project / "notebooks" / "explore.ipynb"
    hub = make_venv(tmp_path / "hub-venv", system_site=False)
    for root in (tmp_path, project):  # the hub's venv inside, then outside the server's root
        env = {"J2C_SERVER_ROOT": str(root)}
        magic = notebook_defaults(notebook.parent, {"__session__": notebook.name}, env, hub)
        ui = send_defaults(notebook, root=root, kernel_prefix=hub)
        assert magic["code_path"] == str(ui.code_path)
        assert magic.get("venv_path") == (str(ui.venv.path) if ui.venv.path else None)
        assert magic["_venv_reason"] == ui.venv.reason
    assert magic.get("venv_path") is None


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


def test_the_cell_lists_what_the_scan_left_out(capsys: pytest.CaptureFixture[str]) -> None:
    import time

    from j2c_server.magic.runtime import CellView
    from j2c_server.wire.api import Event, EventKind, Stage
    from tests.cli.test_left_out import plan

    view = CellView("j1")
    view.handle(
        Event(
            job_id="j1",
            seq=1,
            time=time.time(),
            kind=EventKind.stage,
            stage=Stage.scan,
            state="finished",
            data={"plan": plan().model_dump(mode="json")},
        )
    )
    said = capsys.readouterr()
    assert "j2c:   secrets (1): .env" in said.out and said.err == ""  # not an error
    assert "data/big.bin" in said.out
