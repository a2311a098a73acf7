"""GET /j2c/api/defaults: the Send form's proposal for a file, by the rule %j2c follows too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from j2c_server.wire.api import SendDefaults


def make_venv(path: Path, *, system_site: bool = False) -> Path:
    path.mkdir(parents=True)
    flag = "true" if system_site else "false"
    (path / "pyvenv.cfg").write_text(f"home = /usr/bin\ninclude-system-site-packages = {flag}\n")
    return path


@pytest.fixture
def project(jp_root_dir: Path) -> Path:
    root = jp_root_dir / "proj"
    (root / "notebooks").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    (root / "notebooks" / "explore.ipynb").write_text("{}")
    (root / "train.py").write_text("print(1)\n")
    return root


async def defaults(jp_fetch: Any, **params: str) -> SendDefaults:
    response = await jp_fetch("j2c", "api", "defaults", params=params)
    assert response.code == 200
    return SendDefaults.model_validate_json(response.body)


async def refused(jp_fetch: Any, **params: str) -> tuple[int, dict[str, Any]]:
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("j2c", "api", "defaults", params=params)
    assert caught.value.response is not None
    return caught.value.code, json.loads(caught.value.response.body)


async def test_no_venv_is_proposed_when_the_project_has_none(jp_fetch: Any, project: Path) -> None:
    # The form used to propose 'proj/.venv' here, and every preflight then failed with 400.
    got = await defaults(jp_fetch, path="proj/notebooks/explore.ipynb")
    assert (got.code_path, got.call_path, got.venv_path) == (
        "proj",
        "notebooks/explore.ipynb",
        None,
    )
    assert "no .venv" in got.venv_reason


async def test_the_projects_venv_is_proposed(jp_fetch: Any, project: Path) -> None:
    make_venv(project / ".venv")
    got = await defaults(jp_fetch, path="proj/train.py")
    assert got.venv_path == "proj/.venv"
    assert got.venv_reason == "the project's venv proj/.venv"


async def test_a_kernel_venv_outside_the_root_is_not_proposed(
    jp_fetch: Any, project: Path, tmp_path: Path
) -> None:
    hub = make_venv(tmp_path / "hub-venv")
    got = await defaults(jp_fetch, path="proj/train.py", kernel_prefix=str(hub))
    assert got.venv_path is None
    assert "outside the server's root" in got.venv_reason


async def test_the_kernels_venv_inside_the_root_is_proposed(
    jp_fetch: Any, project: Path, jp_root_dir: Path
) -> None:
    venv = make_venv(jp_root_dir / "envs" / "ml")
    got = await defaults(jp_fetch, path="proj/train.py", kernel_prefix=str(venv))
    assert got.venv_path == "envs/ml"


@pytest.mark.parametrize(
    ("params", "field", "code"),
    [
        ({}, "path", 400),
        ({"path": "proj/missing.py"}, "path", 400),
        ({"path": "../outside.py"}, "path", 403),
        ({"path": "proj/train.py", "kernel_prefix": "relative/venv"}, "kernel_prefix", 400),
    ],
    ids=["missing", "not-found", "outside", "relative-prefix"],
)
async def test_bad_input_names_the_field(
    jp_fetch: Any, project: Path, params: dict[str, str], field: str, code: int
) -> None:
    status, body = await refused(jp_fetch, **params)
    assert (status, body["field"]) == (code, field)
