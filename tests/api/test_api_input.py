"""Bad input to the REST and websocket routes: a 4xx that names the field, and nothing created.

Paths are confined to the server's root folder: ``..``, absolute paths elsewhere and symlinks
that lead out are refused with 403.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from tests.support.jobs import job_body


async def _refused(
    jp_fetch: Any, *parts: str, body: Any = None, **kwargs: Any
) -> tuple[int, dict[str, Any]]:
    method = "POST" if body is not None else "GET"
    payload = body if isinstance(body, str) else json.dumps(body) if body is not None else None
    with pytest.raises(HTTPClientError) as refused:
        await jp_fetch(*parts, method=method, body=payload, **kwargs)
    response = refused.value.response
    assert response is not None
    return refused.value.code, json.loads(response.body)


async def _no_jobs(jp_fetch: Any) -> bool:
    return json.loads((await jp_fetch("j2c", "api", "jobs")).body) == []


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"code_path": "../outside"}, "code_path"),
        ({"code_path": "/"}, "code_path"),
        ({"call_path": "../../etc/passwd"}, "call_path"),
        ({"venv_path": "../venv"}, "venv_path"),
    ],
    ids=["dotdot", "absolute-outside", "call-outside", "venv-outside"],
)
async def test_path_outside_the_root_is_forbidden(
    jp_fetch: Any, project: Path, fields: dict[str, Any], field: str
) -> None:
    code, body = await _refused(jp_fetch, "j2c", "api", "jobs", body=job_body(**fields))
    assert (code, body["field"]) == (403, field)
    assert await _no_jobs(jp_fetch)


async def test_symlink_out_of_the_root_is_forbidden(
    jp_fetch: Any, project: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "train.py").write_text("print('hi')\n")
    (project.parent / "escape").symlink_to(outside)
    code, body = await _refused(
        jp_fetch,
        "j2c",
        "api",
        "jobs",
        body=job_body(code_path="escape", call_path="escape/train.py"),
    )
    assert (code, body["field"]) == (403, "code_path")


async def test_absolute_path_inside_the_root_is_accepted(jp_fetch: Any, project: Path) -> None:
    response = await jp_fetch(
        "j2c",
        "api",
        "preflight",
        method="POST",
        body=json.dumps(job_body(code_path=str(project), call_path="train.py")),
    )
    assert response.code == 200


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"code_path": "missing"}, "code_path"),
        ({"call_path": "proj/missing.py"}, "call_path"),
        ({"venv_path": "proj"}, "venv_path"),
        ({"resources": {"gpus": -1}}, "resources.gpus"),
        ({"resources": {"memory": "lots"}}, "resources.memory"),
        ({"env": {"1BAD": "x"}}, "env"),
        ({"scheduler": "nope"}, "scheduler"),
        ({"compression_level": 99}, "compression_level"),
        ({"surprise": True}, "surprise"),
        ({"args": "not-a-list"}, "args"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
async def test_bad_field_is_a_400_naming_it(
    jp_fetch: Any, project: Path, fields: dict[str, Any], field: str
) -> None:
    code, body = await _refused(jp_fetch, "j2c", "api", "jobs", body=job_body(**fields))
    assert (code, body["field"]) == (400, field)
    assert await _no_jobs(jp_fetch)


async def test_missing_required_field_is_named(jp_fetch: Any, project: Path) -> None:
    code, body = await _refused(jp_fetch, "j2c", "api", "jobs", body={"code_path": "proj"})
    assert (code, body["field"]) == (400, "call_path")


async def test_body_that_is_not_json_is_a_400(jp_fetch: Any, project: Path) -> None:
    code, body = await _refused(jp_fetch, "j2c", "api", "jobs", body="{not json")
    assert code == 400
    assert "JSON" in body["message"]


async def test_bad_after_is_a_400_naming_it(jp_fetch: Any, project: Path) -> None:
    code, body = await _refused(
        jp_fetch, "j2c", "api", "jobs", "some-job", "events", params={"after": "-1"}
    )
    assert (code, body["field"]) == (400, "after")


async def test_unknown_job_is_a_404(jp_fetch: Any) -> None:
    code, body = await _refused(jp_fetch, "j2c", "api", "jobs", "no-such-job")
    assert (code, body["field"]) == (404, "job_id")


async def test_preflight_reports_the_plan_without_creating_a_job(
    jp_fetch: Any, project: Path
) -> None:
    response = await jp_fetch("j2c", "api", "preflight", method="POST", body=json.dumps(job_body()))
    plan = json.loads(response.body)
    assert plan["entry"]["target"] == "train.py"
    assert await _no_jobs(jp_fetch)
