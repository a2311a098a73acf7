"""Deep trees are refused cleanly, j2c's own data never ships, editable-install metadata does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from j2c_server.config import J2CSettings
from j2c_server.core.errors import PackError
from j2c_server.jobs.send.inputs import pack_spec
from j2c_server.pack import ExcludeRule, PackSpec, pack, preflight
from j2c_server.wire.api import JobRecord, JobRequest, JobStatus
from j2c_server.wire.manifest import LayerRole
from tests.pack.archives import names, open_layer
from tests.pack.test_cli_build import run_build
from tests.support.jobs import TRAIN_PY, job_body
from tests.support.projects import backdate, make_venv, site_packages, write

DEPTH = 1_100


def _deep(root: Path, depth: int = DEPTH) -> Path:
    """``root/d/d/.../d`` (``depth`` folders; the path stays under PATH_MAX) with a file."""
    root.mkdir(parents=True, exist_ok=True)
    path = root
    for _ in range(depth):
        path = path / "d"
        os.mkdir(path)
    (path / "leaf.txt").write_text("deep\n")
    return path


def _remove_deep(root: Path) -> None:
    """Iteratively (shutil.rmtree recurses once per level)."""
    path = root
    while (path / "d").is_dir():
        path = path / "d"
    (path / "leaf.txt").unlink(missing_ok=True)
    while path != root.parent:
        os.rmdir(path)
        path = path.parent


@pytest.fixture
def deep_project(project: Path) -> Iterator[Path]:
    _deep(project / "nested")
    yield project
    _remove_deep(project / "nested")


def test_a_tree_1100_levels_deep_is_a_clean_pack_error(
    deep_project: Path, venv: Path, cache: Path
) -> None:
    spec = PackSpec(code_path=deep_project, call_path="train.py", venv_path=venv)
    for call in (lambda: preflight(spec), lambda: pack(spec, cache)):
        with pytest.raises(PackError) as caught:
            call()
        assert caught.value.field == "code_path"
        assert "more than 256 folders deep" in caught.value.message
        assert caught.value.message.startswith("nested/d/d/")


def test_cli_says_the_tree_is_too_deep(deep_project: Path, venv: Path, tmp_path: Path) -> None:
    args = ["--code-path", str(deep_project), "--call-path", "train.py", "--venv-path", str(venv)]
    done = run_build(tmp_path / "data", *args)
    assert done.returncode == 2, done.stderr
    assert "more than 256 folders deep" in done.stderr and "Traceback" not in done.stderr


def test_deep_tree_excluded_by_an_ignore_file_packs(
    deep_project: Path, venv: Path, cache: Path
) -> None:
    write(deep_project / ".j2cignore", "nested/\n")
    result = pack(PackSpec(code_path=deep_project, call_path="train.py", venv_path=venv), cache)
    assert result.layer(LayerRole.code) is not None


def test_deep_tree_in_the_venv_names_the_venv(tmp_path: Path, project: Path) -> None:
    venv = make_venv(tmp_path / "venv")
    _deep(venv / "share")
    try:
        with pytest.raises(PackError) as caught:
            preflight(PackSpec(code_path=project, call_path="train.py", venv_path=venv))
        assert caught.value.field == "venv_path"
    finally:
        _remove_deep(venv / "share")


def test_j2c_data_dir_inside_the_project_is_never_packed(
    project: Path, venv: Path, cache: Path
) -> None:
    data = project / ".local" / "share" / "jupyter" / "j2c"
    write(data / "registry.sqlite3", "jobs")
    write(data / "store" / "blobs" / "sha256" / "abc.tar.zst", "a layer")
    write(data / "runs" / "job-1" / "request.env", "AWS_SECRET_ACCESS_KEY=x\n")
    spec = PackSpec(
        code_path=project,
        call_path="train.py",
        venv_path=venv,
        never_pack=[data],
        includes=[".local/share/jupyter/j2c/registry.sqlite3"],  # never means never
    )
    plan = preflight(spec)
    group = next(g for g in plan.excluded if g.rule == ExcludeRule.j2c_data)
    assert (group.layer, group.paths) == (LayerRole.code, [".local/share/jupyter/j2c/"])
    code = pack(spec, cache).layer(LayerRole.code)
    assert code is not None
    assert not [n for n in names(code.path) if "j2c" in n.split("/")]


def test_the_server_spec_never_packs_its_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("J2C_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("J2C_CONFIG", raising=False)
    settings = J2CSettings()
    record = JobRecord(
        id="j-1",
        name="train",
        key="k",
        status=JobStatus.queued,
        request=JobRequest(code_path=str(tmp_path), call_path="train.py"),
        scheduler="local",
        created_at=0.0,
        updated_at=0.0,
    )
    spec = pack_spec(settings, record)
    assert spec.never_pack == [tmp_path / "data"]
    assert spec.secret_scan_cache == tmp_path / "data" / "layers"


def _legacy_develop_install(project: Path, venv: Path) -> None:
    """What ``python setup.py develop`` leaves: metadata in the project, links in the venv."""
    write(project / "src" / "mylib" / "__init__.py", "ANSWER = 42\n")
    write(
        project / "src" / "mylib.egg-info" / "PKG-INFO",
        "Metadata-Version: 2.1\nName: mylib\nVersion: 3.2.1\n",
    )
    write(project / "src" / "mylib.egg-info" / "top_level.txt", "mylib\n")
    write(project / ".gitignore", "outputs/\n*.log\n*.egg-info\n")
    site = site_packages(venv)
    write(site / "mylib.egg-link", f"{project / 'src'}\n.\n")
    write(site / "easy-install.pth", f"{project / 'src'}\n")
    backdate(project)
    backdate(venv)


def test_editable_install_metadata_ships_although_gitignored(
    tmp_path: Path, project: Path, cache: Path
) -> None:
    venv = make_venv(tmp_path / "venv")
    _legacy_develop_install(project, venv)
    result = pack(PackSpec(code_path=project, call_path="train.py", venv_path=venv), cache)
    code = result.layer(LayerRole.code)
    assert code is not None
    assert "src/mylib.egg-info/PKG-INFO" in names(code.path)
    # The job's view: the code layer extracted, the project folder on sys.path as the .pth says.
    job = tmp_path / "job"
    with open_layer(code.path) as archive:
        archive.extractall(job, filter="data")
    probe = (
        f"import sys; sys.path.insert(0, {str(job / 'src')!r}); "
        "import importlib.metadata as m, mylib; print(m.version('mylib'), mylib.ANSWER)"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", probe],
        capture_output=True,
        text=True,
        check=True,
    )  # fmt: skip
    assert out.stdout.split() == ["3.2.1", "42"]
    assert tarfile  # the archive was read with the standard library's reader


@pytest.fixture
def root_project(jp_root_dir: Path) -> Path:
    """``<server root>/proj`` (this folder's ``project`` fixture is not under the root)."""
    write(jp_root_dir / "proj" / "train.py", TRAIN_PY)
    backdate(jp_root_dir / "proj")
    return jp_root_dir / "proj"


async def test_api_refuses_a_deep_tree_with_400(jp_fetch: Any, root_project: Path) -> None:
    project = root_project
    _deep(project / "nested")
    try:
        with pytest.raises(HTTPClientError) as caught:
            await jp_fetch("j2c", "api", "preflight", method="POST", body=json.dumps(job_body()))
        assert caught.value.code == 400
        assert caught.value.response is not None
        body = json.loads(caught.value.response.body)
        assert body["field"] == "code_path" and "folders deep" in body["message"]
    finally:
        _remove_deep(project / "nested")


async def test_api_leaves_out_its_data_dir_when_the_root_holds_it(
    jp_fetch: Any, root_project: Path, j2c_data_dir: Path, jp_root_dir: Path
) -> None:
    # Behind JupyterHub the server root is HOME: its data dir is inside the project folder.
    response = await jp_fetch(
        "j2c", "api", "preflight", method="POST", body=json.dumps(job_body(code_path="."))
    )
    plan = json.loads(response.body)
    group = next(g for g in plan["excluded"] if g["rule"] == "j2c_data")
    assert group["paths"] == [j2c_data_dir.relative_to(jp_root_dir).as_posix() + "/"]


@pytest.fixture
def j2c_data_dir(jp_root_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This module's data dir lies inside the server root, as under a hub's HOME."""
    data = jp_root_dir / ".local" / "share" / "jupyter" / "j2c"
    data.mkdir(parents=True)
    monkeypatch.setenv("J2C_DATA_DIR", str(data))
    monkeypatch.delenv("J2C_CONFIG", raising=False)
    return data
