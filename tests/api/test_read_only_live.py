"""A read-only identity on a *running* job, as JupyterHub's read-only sharing grants it: it
lists the job, reads it and follows its websocket live to the end, while submitting,
cancelling and removing are 403s whose message names the permission missing, and change
nothing (the job runs on to ``succeeded``). tests/test_auth.py covers every route's codes and a
finished job; this adds the live follow and what the refusal says."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from jupyter_server.auth import Authorizer
from tornado import web
from tornado.httpclient import HTTPClientError

from j2c_server.server.handler_base import AUTH_RESOURCE, READ, declared_actions
from j2c_server.server.handlers import ROUTES
from j2c_server.wire.api import JobRecord, JobStatus
from tests.support.jobs import final_status, follow, job_body, log_lines, submit

LINES = 30


class ReadOnlyWhenAsked(Authorizer):  # type: ignore[misc]
    """Everything until ``read_only`` is set; then only ``read`` on ``j2c``."""

    read_only: ClassVar[bool] = False

    def is_authorized(
        self, handler: web.RequestHandler, user: Any, action: str, resource: str
    ) -> bool:
        return not type(self).read_only or (action == READ and resource == AUTH_RESOURCE)


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> Iterator[dict[str, Any]]:
    config = {**jp_server_config}
    config["ServerApp"] = {**config["ServerApp"], "authorizer_class": ReadOnlyWhenAsked}
    ReadOnlyWhenAsked.read_only = False
    yield config
    ReadOnlyWhenAsked.read_only = False


async def test_read_only_follows_a_running_job_and_cannot_change_it(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path
) -> None:
    record = await submit(jp_fetch, args=["--lines", str(LINES), "--sleep", "0.1"])
    ReadOnlyWhenAsked.read_only = True
    job = ("j2c", "api", "jobs", record.id)

    following = asyncio.create_task(follow(jp_ws_fetch, record.id))
    listed = json.loads((await jp_fetch("j2c", "api", "jobs")).body)
    assert [j["id"] for j in listed] == [record.id]
    read = JobRecord.model_validate_json((await jp_fetch(*job)).body)
    assert read.status not in (JobStatus.cancelled, JobStatus.failed)

    refusals: dict[str, str] = {}
    for name, parts, method, body in [
        ("submit", ("j2c", "api", "jobs"), "POST", json.dumps(job_body())),
        ("cancel", (*job, "cancel"), "POST", "{}"),
        ("remove", job, "DELETE", None),
    ]:
        with pytest.raises(HTTPClientError) as refused:
            await jp_fetch(*parts, method=method, body=body)
        assert refused.value.code == 403, name
        assert refused.value.response is not None
        refusals[name] = json.loads(refused.value.response.body)["message"]

    wanted = {
        "submit": _declared("JobsHandler", "POST"),
        "cancel": _declared("CancelHandler", "POST"),
        "remove": _declared("JobHandler", "DELETE"),
    }
    for name, message in refusals.items():
        assert f"not authorized to {wanted[name]} on resource: {AUTH_RESOURCE}" in message, (
            name,
            message,
        )

    events = await following
    assert final_status(events) == JobStatus.succeeded
    assert [line for line in log_lines(events) if line.startswith("line ")] == [
        f"line {i}" for i in range(LINES)
    ]
    ReadOnlyWhenAsked.read_only = False
    after = JobRecord.model_validate_json((await jp_fetch(*job)).body)
    assert after.status == JobStatus.succeeded
    listed = json.loads((await jp_fetch("j2c", "api", "jobs")).body)
    assert [j["id"] for j in listed] == [record.id]


def _declared(handler_name: str, method: str) -> str:
    for route in ROUTES:
        if route.handler.__name__ == handler_name:
            action = declared_actions(route.handler)[method]
            assert action is not None and action != READ
            return action
    raise AssertionError(f"no route for {handler_name}")
