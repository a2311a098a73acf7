"""A file:// store with a scheduler whose jobs run elsewhere: warned at preflight, refused at
submit, naming storage.url; storage.shared: true declares the folder mounted on the nodes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from j2c_server.config import J2CSettings
from j2c_server.jobs.send.preflight import store_problem


@pytest.fixture
def body(jp_root_dir: Path) -> dict[str, Any]:
    project = jp_root_dir / "project"
    project.mkdir()
    (project / "train.py").write_text("print(1)\n")
    return {"code_path": "project", "call_path": "train.py", "scheduler": "slurm"}


async def test_submit_is_refused_naming_the_setting(jp_fetch: Any, body: dict[str, Any]) -> None:
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("j2c", "api", "jobs", method="POST", body=json.dumps(body))
    assert caught.value.response is not None
    answer = json.loads(caught.value.response.body)
    assert answer["field"] == "storage.url"
    assert "storage.shared" in answer["message"] and "slurm" in answer["message"]
    assert json.loads((await jp_fetch("j2c", "api", "jobs")).body) == []


async def test_preflight_warns_naming_the_setting(jp_fetch: Any, body: dict[str, Any]) -> None:
    response = await jp_fetch("j2c", "api", "preflight", method="POST", body=json.dumps(body))
    warnings = json.loads(response.body)["warnings"]
    assert [w["path"] for w in warnings if w["code"] == "store_not_shared"] == ["storage.url"]


def test_shared_store_s3_store_and_local_scheduler_pass() -> None:
    file_store = {"storage": {"url": "file:///srv/j2c"}}
    assert store_problem(J2CSettings.model_validate(file_store), "kubernetes") is not None
    assert store_problem(J2CSettings.model_validate(file_store), "local") is None
    shared = {"storage": {"url": "file:///srv/j2c", "shared": True}}
    assert store_problem(J2CSettings.model_validate(shared), "slurm") is None
    s3 = {"storage": {"url": "s3://bucket/j2c"}}
    assert store_problem(J2CSettings.model_validate(s3), "slurm") is None


def test_the_cli_refuses_it_with_exit_2(run_j2c: Any, cli_project: Path, cli_venv: Path) -> None:
    result = run_j2c(
        "submit", "train.py", "--venv-path", str(cli_venv), "--scheduler", "slurm", cwd=cli_project
    )
    assert result.returncode == 2, result.stderr
    assert "storage.url" in result.stderr and "storage.shared" in result.stderr
