"""The one credential rule for a request's env, the caps of :class:`JobRequest`, and a dry run
that shows where an allowed credential goes without showing it."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from j2c_server.config import J2CSettings
from j2c_server.core.errors import InvalidInput
from j2c_server.core.job_env import (
    MASK,
    check_request_env,
    credential_value,
    is_credential_name,
    job_env,
    mask_env,
)
from j2c_server.jobs.service import JobService
from j2c_server.wire.api import JobRequest
from tests.support.jobs import settle


@pytest.mark.parametrize(
    "name",
    [
        "AWS_SECRET_ACCESS_KEY",
        "AWS_ACCESS_KEY_ID",
        "AWS_SESSION_TOKEN",
        "AWS_SECURITY_TOKEN",
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "GITHUB_TOKEN",
        "JUPYTERHUB_API_TOKEN",
        "OPENAI_API_KEY",
        "WANDB_API_KEY",
        "MLFLOW_TRACKING_PASSWORD",
        "PGPASSWORD",
        "DB_PASS",
        "CLIENT_SECRET",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "SSH_PRIVATE_KEY",
        "SLURM_JWT",
        "aws_secret_access_key",
    ],
)
def test_credential_like_names(name: str) -> None:
    assert is_credential_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "PATH",
        "PYTHONPATH",
        "TOKENIZERS_PARALLELISM",
        "KEYRING_BACKEND",
        "AWS_DEFAULT_REGION",
        "AWS_ENDPOINT_URL",
        "CUDA_VISIBLE_DEVICES",
        "WANDB_MODE",
        "HF_HOME",
        "PWD",
        "MASTER_PORT",
    ],
)
def test_innocent_names(name: str) -> None:
    assert not is_credential_name(name)


def test_a_listed_name_takes_the_servers_value_and_is_masked() -> None:
    environ = {"HF_TOKEN": "server-value"}
    check_request_env({"HF_TOKEN": "", "MODE": "x"}, ["HF_TOKEN"], environ)
    env = job_env({"HF_TOKEN": "", "MODE": "x"}, ["HF_TOKEN"], environ)
    assert env == {"HF_TOKEN": "server-value", "MODE": "x"}
    assert mask_env(env, ["HF_TOKEN"]) == {"HF_TOKEN": MASK, "MODE": "x"}


def test_an_unlisted_credential_is_refused_naming_it() -> None:
    with pytest.raises(InvalidInput) as caught:
        check_request_env({"A": "1", "AWS_SECRET_ACCESS_KEY": "k"}, ["HF_TOKEN"], {})
    assert caught.value.field == "env.AWS_SECRET_ACCESS_KEY"
    assert caught.value.hint is not None and "scheduler.pass_env" in caught.value.hint


@pytest.mark.parametrize(
    ("name", "value", "what"),
    [
        ("DATABASE_URL", "postgres://trainer:s3cr3t@db.example:5432/runs", "a URL with a password"),
        ("MANIFEST", "https://b.s3.example/m.json?X-Amz-Signature=abc123", "a signed URL"),
        ("BLOB", "https://acct.blob.example/c/b?sv=2024&sig=abc%2Bdef", "a signed URL"),
        ("CONFIG", "region=eu;id=AKIAIOSFODNN7EXAMPL2", "an AWS access key id"),
        ("GH", "ghp_" + "a1B2c3D4e5" * 3 + "f6G7h8", "a GitHub token"),
        ("LLM", "sk-proj-" + "Ab1" * 10, "an OpenAI or Anthropic key"),
        ("HF", "hf_" + "a" * 34, "a Hugging Face token"),
    ],
)
def test_a_value_that_looks_like_a_credential_is_refused_naming_it(
    name: str, value: str, what: str
) -> None:
    assert credential_value(value) == what
    with pytest.raises(InvalidInput) as caught:
        check_request_env({name: value}, [], {})
    assert caught.value.field == f"env.{name}"
    assert what in caught.value.message and value not in caught.value.message
    assert mask_env({name: value}) == {name: MASK}


@pytest.mark.parametrize(
    "value",
    [
        "postgres://db.example:5432/runs",
        "https://trainer@example.com/path?page=2&size=10",
        "0.1",
        "sha256:" + "ab" * 32,
        "skip-the-warmup",
        "/home/ada/data",
    ],
)
def test_innocent_values(value: str) -> None:
    assert credential_value(value) is None
    check_request_env({"SETTING": value}, [], {})


def test_a_listed_name_gone_from_the_environment_at_job_spec_time_fails_naming_it() -> None:
    with pytest.raises(InvalidInput) as caught:
        job_env({"HF_TOKEN": ""}, ["HF_TOKEN"], {})
    assert caught.value.field == "env.HF_TOKEN"


# --------------------------------------------------------------------------- JobRequest caps


def _request(**fields: object) -> JobRequest:
    return JobRequest.model_validate({"code_path": ".", "call_path": "main.py", **fields})


@pytest.mark.parametrize(
    ("fields", "loc"),
    [
        ({"env": {f"V{i}": "" for i in range(257)}}, ("env",)),
        ({"env": {"BIG": "é" * (16 * 1024 + 1)}}, ("env", "BIG")),  # bytes, not characters
        ({"env": {"N" * 257: ""}}, ("env",)),
        ({"env": {f"V{i}": "x" * 30_000 for i in range(10)}}, ("env",)),
        ({"args": ["a"] * 1025}, ("args",)),
        ({"args": ["ok", "b" * (32 * 1024 + 1)]}, ("args", 1)),
        ({"args": ["c" * 30_000] * 10}, ("args",)),
    ],
)
def test_caps_name_the_field(fields: dict[str, object], loc: tuple[object, ...]) -> None:
    with pytest.raises(ValidationError) as caught:
        _request(**fields)
    assert caught.value.errors()[0]["loc"] == loc


def test_requests_at_the_caps_pass() -> None:
    request = _request(
        env={f"V{i}": "" for i in range(255)} | {"BIG": "x" * 32 * 1024},
        args=["a"] * 1023 + ["b" * 32 * 1024],
    )
    assert (len(request.env), len(request.args)) == (256, 1024)


# --------------------------------------------------------------------------- dry run


async def test_a_dry_run_shows_an_allowed_credential_masked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", "never-shown")
    project = tmp_path / "proj"
    project.mkdir()
    (project / "main.py").write_text("print(1)\n")
    settle(project)
    settings = J2CSettings.model_validate(
        {"data_dir": str(tmp_path / "data"), "scheduler": {"pass_env": ["HF_TOKEN"]}}
    )
    service = JobService(settings)
    try:
        shown = await service.dry_run(
            JobRequest(code_path=str(project), call_path="main.py", env={"HF_TOKEN": ""})
        )
    finally:
        await service.stop()
    assert shown["env"]["HF_TOKEN"] == MASK  # by reference, shown by name
    assert "never-shown" not in str(shown)
