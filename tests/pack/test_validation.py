"""Bad input: a PackError naming the field, a message that says what is wrong, nothing written."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from j2c_server.core.errors import PackError
from j2c_server.pack import PackSpec, pack, preflight
from tests.support.projects import add_distribution, make_project, make_venv, write


def refused(spec: PackSpec, cache: Path, field: str, *words: str) -> PackError:
    """pack() refuses ``spec`` naming ``field`` and every word, and leaves ``cache`` unwritten."""
    with pytest.raises(PackError) as caught:
        pack(spec, cache)
    error = caught.value
    assert error.field == field
    for word in words:
        assert word in str(error)
    assert not cache.exists()
    return error


def test_missing_code_path(tmp_path: Path, cache: Path) -> None:
    spec = PackSpec(code_path=tmp_path / "nope", call_path="train.py")
    refused(spec, cache, "code_path", "does not exist")


def test_code_path_that_is_a_file(project: Path, cache: Path) -> None:
    spec = PackSpec(code_path=project / "train.py", call_path="train.py")
    refused(spec, cache, "code_path", "not a directory")


def test_missing_call_path(project: Path, cache: Path) -> None:
    spec = PackSpec(code_path=project, call_path="nope.py")
    refused(spec, cache, "call_path", "nope.py", "does not exist")


def test_call_path_outside_the_code_path(project: Path, tmp_path: Path, cache: Path) -> None:
    write(tmp_path / "other.py", "print('not in the project')\n")
    for call in ("../other.py", str(tmp_path / "other.py")):
        spec = PackSpec(code_path=project, call_path=call)
        refused(spec, cache, "call_path", "outside the code path")


def test_call_path_that_is_not_a_script_or_notebook(project: Path, cache: Path) -> None:
    spec = PackSpec(code_path=project, call_path="data/train.csv")
    refused(spec, cache, "call_path", ".py script", ".ipynb notebook")


def test_call_path_left_out_by_an_ignore_rule(project: Path, cache: Path) -> None:
    write(project / "outputs" / "rerun.py", "print('ignored by .gitignore')\n")
    spec = PackSpec(code_path=project, call_path="outputs/rerun.py")
    refused(spec, cache, "call_path", "excluded by rule '.gitignore'", "includes")


def test_notebook_and_absolute_call_paths_are_accepted(project: Path) -> None:
    assert preflight(PackSpec(code_path=project, call_path="analysis.ipynb")).entry.kind == (
        "notebook"
    )
    plan = preflight(PackSpec(code_path=project, call_path=str(project / "train.py")))
    assert (plan.entry.kind, plan.entry.target) == ("script", "train.py")


def test_call_path_relative_to_the_current_directory(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project.parent)
    plan = preflight(PackSpec(code_path="project", call_path="project/mypkg/model.py"))
    assert plan.entry.target == "mypkg/model.py"


def test_module_in_the_code_path(project: Path) -> None:
    plan = preflight(PackSpec(code_path=project, call_path="-m mypkg.model"))
    assert (plan.entry.kind, plan.entry.target) == ("module", "mypkg.model")
    assert preflight(PackSpec(code_path=project, call_path="-m mypkg")).entry.target == "mypkg"


def test_module_in_the_venv(project: Path, venv: Path) -> None:
    plan = preflight(PackSpec(code_path=project, call_path="-m tinypkg", venv_path=venv))
    assert plan.entry.target == "tinypkg"


def test_module_of_the_base_interpreter(project: Path, venv: Path) -> None:
    plan = preflight(PackSpec(code_path=project, call_path="-m json.tool", venv_path=venv))
    assert plan.entry.target == "json.tool"


def test_module_that_does_not_resolve(project: Path, venv: Path, cache: Path) -> None:
    spec = PackSpec(code_path=project, call_path="-m mypkg.nope", venv_path=venv)
    refused(spec, cache, "call_path", "'mypkg.nope' was not found")


def test_module_name_that_is_not_valid(project: Path, cache: Path) -> None:
    spec = PackSpec(code_path=project, call_path="-m my-pkg.train")
    refused(spec, cache, "call_path", "not a valid module name")


def test_venv_path_missing(project: Path, tmp_path: Path, cache: Path) -> None:
    spec = PackSpec(code_path=project, call_path="train.py", venv_path=tmp_path / "nope")
    refused(spec, cache, "venv_path", "does not exist")


def test_venv_path_without_pyvenv_cfg(project: Path, tmp_path: Path, cache: Path) -> None:
    (tmp_path / "not-a-venv" / "lib").mkdir(parents=True)
    spec = PackSpec(code_path=project, call_path="train.py", venv_path=tmp_path / "not-a-venv")
    error = refused(spec, cache, "venv_path", "not a virtual environment", "pyvenv.cfg")
    assert error.hint is not None and "--system-site-packages" in error.hint


def test_editable_install_outside_the_code_path(project: Path, tmp_path: Path, cache: Path) -> None:
    venv = make_venv(tmp_path / "venv", packages={})
    add_distribution(venv, "outsider", "0.1", editable_path=tmp_path / "outsider-src")
    spec = PackSpec(code_path=project, call_path="train.py", venv_path=venv)
    refused(spec, cache, "venv_path", "editable install 'outsider'", "outside the code path")


def test_editable_install_of_the_project_itself_is_fine(project: Path, tmp_path: Path) -> None:
    write(project / "src" / "srcpkg" / "cli.py", "print('src layout')\n")
    venv = make_venv(tmp_path / "venv", packages={})
    add_distribution(venv, "srcpkg", "0.1", editable_path=project / "src")
    plan = preflight(PackSpec(code_path=project, call_path="-m srcpkg.cli", venv_path=venv))
    assert plan.entry.target == "srcpkg.cli"


def test_include_that_does_not_exist(project: Path, cache: Path) -> None:
    spec = PackSpec(code_path=project, call_path="train.py", includes=["nope.env"])
    refused(spec, cache, "includes", "nope.env", "does not exist")


def test_include_outside_the_project(project: Path, cache: Path) -> None:
    spec = PackSpec(code_path=project, call_path="train.py", includes=["../elsewhere"])
    refused(spec, cache, "includes", "not a path inside")


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A folder another user (or root without its override capabilities) can enter: pytest's
    own tmp folders are private to the user who runs the tests."""
    path = Path(tempfile.mkdtemp(prefix="j2c-unreadable-"))
    path.chmod(0o777)
    yield path
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            os.chmod(os.path.join(dirpath, name), 0o644)
    shutil.rmtree(path)


def test_unreadable_file(shared_tmp: Path) -> None:
    project = make_project(shared_tmp / "project", secrets=False)
    (project / "data" / "train.csv").chmod(0o000)
    cache = shared_tmp / "cache"
    code = (
        "import json, sys\n"
        "from j2c_server.core.errors import PackError\n"
        "from j2c_server.pack import PackSpec, pack\n"
        "try:\n"
        f"    pack(PackSpec(code_path={str(project)!r}, call_path='train.py'), {str(cache)!r})\n"
        "except PackError as exc:\n"
        "    print(json.dumps({'field': exc.field, 'message': str(exc)}))\n"
    )
    command = [sys.executable, "-c", code]
    if os.geteuid() == 0:
        # Root reads anything; without these two capabilities it obeys file modes like anyone.
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root and setpriv (util-linux) is not installed")
        command = [setpriv, "--bounding-set", "-dac_override,-dac_read_search", *command]
    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run(command, capture_output=True, text=True, cwd=repo, check=True).stdout
    error = json.loads(out)
    assert error["field"] == "code_path"
    assert "cannot read" in error["message"] and "data/train.csv" in error["message"]
    assert not cache.exists()


def test_exclude_pattern_that_is_not_valid(project: Path, cache: Path) -> None:
    spec = PackSpec(code_path=project, call_path="train.py", excludes=["*.tmp", "!"])
    refused(spec, cache, "excludes", "'!'")
