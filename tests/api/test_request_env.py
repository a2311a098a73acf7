"""Credentials and oversized input in a request, through the real server.

A credential-like ``env`` entry is refused the same way whichever backend the request names,
unless the operator lists it in ``scheduler.pass_env``: then the job gets the server's own value,
and that value is nowhere in the data dir (registry bytes included), the job listing or the
events. Caps on env and args answer 400 naming the field.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from j2c_server.wire.api import JobStatus
from tests.support.jobs import final_status, follow, job_body, log_lines, settle, submit

SECRET = "hf_S3cr3tValueThatMustNeverBeStored"
PRINT_TOKEN_HASH = """\
import hashlib, os
print("token", hashlib.sha256(os.environ["HF_TOKEN"].encode()).hexdigest(), flush=True)
"""


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    overrides = {
        "scheduler": {
            "pass_env": ["HF_TOKEN", "UNSET_TOKEN"],
            # The job's j2c-unpack runs this checkout's code.
            "local": {"pass_env": ["PYTHONPATH"]},
        }
    }
    return {**jp_server_config, "J2CApp": {"settings_overrides": overrides}}


async def _refused(jp_fetch: Any, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    with pytest.raises(HTTPClientError) as refused:
        await jp_fetch("j2c", "api", "jobs", method="POST", body=json.dumps(body))
    response = refused.value.response
    assert response is not None
    return refused.value.code, json.loads(response.body)


async def _no_jobs(jp_fetch: Any) -> bool:
    return json.loads((await jp_fetch("j2c", "api", "jobs")).body) == []


@pytest.mark.parametrize("scheduler", ["local", "slurm", "kubernetes", "container"])
@pytest.mark.parametrize(
    "name",
    [
        "AWS_SECRET_ACCESS_KEY",
        "AWS_ACCESS_KEY_ID",
        "AWS_SESSION_TOKEN",
        "GITHUB_TOKEN",
        "WANDB_API_KEY",
        "DB_PASSWORD",
        "GOOGLE_APPLICATION_CREDENTIALS",
    ],
)
async def test_a_credential_in_env_is_refused_on_every_backend(
    jp_fetch: Any, project: Path, scheduler: str, name: str
) -> None:
    body = job_body(env={name: "s3cr3t-value"}, scheduler=scheduler)
    code, error = await _refused(jp_fetch, body)
    assert (code, error["field"]) == (400, f"env.{name}")
    assert "credential" in error["message"]
    assert "scheduler.pass_env" in error["hint"] and "Secret" in error["hint"]
    assert "s3cr3t-value" not in json.dumps(error)
    assert await _no_jobs(jp_fetch)


async def test_preflight_refuses_a_credential_too(jp_fetch: Any, project: Path) -> None:
    with pytest.raises(HTTPClientError) as refused:
        await jp_fetch(
            "j2c",
            "api",
            "preflight",
            method="POST",
            body=json.dumps(job_body(env={"HF_TOKEN_X": "v"})),
        )
    assert refused.value.code == 400


async def test_innocent_names_that_contain_a_word_pass(
    jp_fetch: Any, project: Path, jp_ws_fetch: Any
) -> None:
    record = await submit(jp_fetch, env={"TOKENIZERS_PARALLELISM": "false", "KEYRING": "x"})
    assert record.request.env == {"TOKENIZERS_PARALLELISM": "false", "KEYRING": "x"}
    assert final_status(await follow(jp_ws_fetch, record.id)) == JobStatus.succeeded


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"HF_TOKEN": "from-the-request"}, "send it empty"),
        ({"UNSET_TOKEN": ""}, "does not set it"),
    ],
)
async def test_an_allowed_name_takes_no_value_and_must_be_set_on_the_server(
    jp_fetch: Any, project: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], message: str
) -> None:
    monkeypatch.setenv("HF_TOKEN", SECRET)
    monkeypatch.delenv("UNSET_TOKEN", raising=False)
    code, error = await _refused(jp_fetch, job_body(env=env))
    [name] = env
    assert (code, error["field"]) == (400, f"env.{name}")
    assert message in error["message"]
    assert await _no_jobs(jp_fetch)


async def test_an_allowed_credential_reaches_the_job_and_is_stored_nowhere(
    jp_fetch: Any,
    jp_ws_fetch: Any,
    jp_root_dir: Path,
    j2c_data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HF_TOKEN", SECRET)
    project = jp_root_dir / "sec"
    project.mkdir()
    (project / "main.py").write_text(PRINT_TOKEN_HASH)
    settle(project)
    record = await submit(jp_fetch, code_path="sec", call_path="sec/main.py", env={"HF_TOKEN": ""})
    events = await follow(jp_ws_fetch, record.id)
    assert final_status(events) == JobStatus.succeeded
    assert log_lines(events) == ["token " + hashlib.sha256(SECRET.encode()).hexdigest()]

    shown = [
        (await jp_fetch("j2c", "api", "jobs")).body,
        (await jp_fetch("j2c", "api", "jobs", record.id)).body,
        (await jp_fetch("j2c", "api", "jobs", record.id, "events")).body,
        json.dumps([event.model_dump(mode="json") for event in events]).encode(),
    ]
    assert all(SECRET.encode() not in body for body in shown)
    stored = [Path(here, name) for here, _, names in os.walk(j2c_data_dir) for name in names]
    assert any(path.name == "registry.sqlite3" for path in stored)
    assert [path for path in stored if SECRET.encode() in path.read_bytes()] == []


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"env": {f"V{i}": "" for i in range(257)}}, "env"),
        ({"env": {"BIG": "x" * (32 * 1024 + 1)}}, "env.BIG"),
        ({"env": {f"V{i}": "x" * 30_000 for i in range(10)}}, "env"),
        ({"args": ["a"] * 1025}, "args"),
        ({"args": ["ok", "b" * (32 * 1024 + 1)]}, "args.1"),
        ({"args": ["c" * 30_000] * 10}, "args"),
    ],
    ids=["env-entries", "env-value", "env-total", "args-count", "arg-size", "args-total"],
)
async def test_caps_on_env_and_args_name_the_field(
    jp_fetch: Any, project: Path, fields: dict[str, Any], field: str
) -> None:
    code, error = await _refused(jp_fetch, job_body(**fields))
    assert (code, error["field"]) == (400, field)
    assert await _no_jobs(jp_fetch)
