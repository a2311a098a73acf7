"""Fixtures of the usage tests: a real Jupyter server whose settings the test's ``store``
marker chooses (the data dir's ``file://`` store, a moto S3 bucket, a store where usage records
cannot be written, a real Slurm), secret-looking values in the server's environment, and the
server log's ``j2c audit`` lines."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_server.auth.identity import IdentityProvider, User

from j2c_server.jobs.audit import AUDIT_PREFIX
from tests.support.s3 import S3Target
from tests.support.slurm import SlurmCluster

REPO = Path(__file__).resolve().parents[2]
# Values that must never reach a usage record: one passed by the operator's allow-list, one in
# the request's env under an innocent name (a private value, not shaped like a credential: one
# that is is refused before the send, #47).
SERVER_SECRET = "hf_j2cTestSecretValue0123456789"
REQUEST_SECRET = "private-run-note-usageTest-4f2a9c"
RECORD_TIMEOUT_S = 60.0
HUB_USER = "alice"


class HubIdentity(IdentityProvider):
    """As JupyterHub's single-user servers: an authenticated request is the hub's user (the
    default token login would make up a new anonymous user per request)."""

    async def get_user(self, handler: Any) -> User | None:  # type: ignore[override]
        user = await self._get_user(handler)
        return None if user is None else User(username=HUB_USER, name=HUB_USER)


@pytest.fixture
def jp_server_config(
    request: pytest.FixtureRequest, jp_server_config: dict[str, Any], monkeypatch: Any
) -> Any:
    monkeypatch.setenv("HF_TOKEN", SERVER_SECRET)
    marker = request.node.get_closest_marker("store")
    kind = marker.args[0] if marker else "file"
    overrides: dict[str, Any] = {
        "scheduler": {"pass_env": ["HF_TOKEN"], "local": {"pass_env": ["PYTHONPATH"]}}
    }
    extra = marker.kwargs.get("settings", {}) if marker else {}
    if kind == "s3":
        bucket: S3Target = request.getfixturevalue("s3_bucket")
        overrides["storage"] = {
            "url": bucket.url,
            "endpoint_url": bucket.endpoint,
            "region": "us-east-1",
            "addressing_style": "path",
        }
    elif kind == "broken":
        # A file where the usage folder would be: every record write fails, for real.
        store = request.getfixturevalue("tmp_path") / "broken-store"
        store.mkdir()
        (store / "usage").write_text("not a folder")
        overrides["storage"] = {"url": store.as_uri()}
    elif kind == "slurm":
        cluster: SlurmCluster = request.getfixturevalue("slurm_cluster")
        overrides["storage"] = {"shared": True}
        overrides["scheduler"]["slurm"] = {
            "url": cluster.url,
            "user": cluster.user,
            "token": cluster.token,
            "job_dir": str(cluster.job_dir),
            "cancel_grace_s": 1.0,
            # The node is this machine: j2c-unpack from this venv, this checkout's code.
            "env": {
                "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
                "PYTHONPATH": str(REPO),
            },
        }
    for section, values in extra.items():
        overrides[section] = {**overrides.get(section, {}), **values}
    server = {**jp_server_config["ServerApp"], "identity_provider_class": HubIdentity}
    return {**jp_server_config, "ServerApp": server, "J2CApp": {"settings_overrides": overrides}}


class AuditLines(logging.Handler):
    """The server log's ``j2c audit`` lines, parsed."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith(AUDIT_PREFIX):
            self.lines.append(json.loads(message[len(AUDIT_PREFIX) :]))

    def of(self, action: str) -> list[dict[str, Any]]:
        return [line for line in self.lines if line["action"] == action]


@pytest.fixture
def audit_lines(jp_serverapp: Any) -> Iterator[AuditLines]:
    """What the server logs (through the logger the extension was given) as audit lines."""
    log = jp_serverapp.web_app.settings["j2c_service"].log
    handler = AuditLines()
    log.addHandler(handler)
    yield handler
    log.removeHandler(handler)


@pytest.fixture
def server_log(jp_serverapp: Any) -> Iterator[list[str]]:
    """Every line the j2c service logs at warning level and above."""
    lines: list[str] = []
    log = jp_serverapp.web_app.settings["j2c_service"].log

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    handler = Keep(logging.WARNING)
    log.addHandler(handler)
    yield lines
    log.removeHandler(handler)


async def jupyter_user(jp_fetch: Callable[..., Any]) -> str:
    """The identity the server gives the test's requests (the hub user)."""
    me = json.loads((await jp_fetch("api", "me")).body)
    name: str = me["identity"]["username"]
    assert name == HUB_USER
    return name


async def wait_for_end_record(read: Callable[[], Any], job_id: str) -> dict[str, Any]:
    """Poll ``read()`` (a parsed record or None) until the job's end record is there."""
    import asyncio

    deadline = time.monotonic() + RECORD_TIMEOUT_S
    while time.monotonic() < deadline:
        record = await read()
        if record is not None and record.get("kind") == "end":
            return dict(record)
        await asyncio.sleep(0.1)
    raise AssertionError(f"no end record of job {job_id} after {RECORD_TIMEOUT_S} s")
