"""Every route the extension registers refuses anonymous requests (HTTP and websocket), and asks
Jupyter's ``Authorizer`` for the action it declares on the ``j2c`` resource.

The list comes from ``handlers.ROUTES`` itself, so a new route is covered without editing this
test, and a route whose method declares no action fails here (and ``routes()`` refuses it).
The read-only identity is a real ``Authorizer`` subclass configured through
``ServerApp.authorizer_class``, as JupyterHub's read-only sharing grants only ``read``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from jupyter_server.auth import Authorizer
from tornado import web
from tornado.httpclient import HTTPClientError, HTTPRequest
from tornado.websocket import WebSocketHandler, websocket_connect

from j2c_server.server import handlers
from j2c_server.server.handler_base import ACTIONS, AUTH_RESOURCE, READ, declared_actions
from j2c_server.server.handlers import ROUTES, routes
from j2c_server.wire.api import JobRecord, JobStatus
from tests.support.jobs import follow, job_body, submit

_GROUP = re.compile(r"\(\?P<(\w+)>[^)]*\)")
PATTERNS = routes()
# (pattern, handler, HTTP method, declared action) for every method of every route.
METHODS = [
    (pattern, handler, method, action)
    for pattern, handler in PATTERNS
    for method, action in declared_actions(handler).items()
]


class SwitchableAuthorizer(Authorizer):  # type: ignore[misc]
    """Allows what ``allowed`` lists (everything while it is ``None``) and records each question,
    so one server can first submit a job and then be read-only."""

    allowed: ClassVar[frozenset[str] | None] = None
    asked: ClassVar[list[tuple[str, str]]] = []

    def is_authorized(
        self, handler: web.RequestHandler, user: Any, action: str, resource: str
    ) -> bool:
        type(self).asked.append((action, resource))
        return self.allowed is None or action in self.allowed


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> Iterator[dict[str, Any]]:
    config = {**jp_server_config}
    config["ServerApp"] = {**config["ServerApp"], "authorizer_class": SwitchableAuthorizer}
    SwitchableAuthorizer.allowed = None
    SwitchableAuthorizer.asked = []
    yield config
    SwitchableAuthorizer.allowed = None


def _only(*actions: str) -> None:
    SwitchableAuthorizer.allowed = frozenset(actions)
    SwitchableAuthorizer.asked = []


def _concrete(pattern: str) -> str:
    """Fill each named group of a route pattern with a harmless value."""
    return _GROUP.sub(lambda m: "0123456789ab", pattern).rstrip("$")


def _url(jp_base_url: str, pattern: str) -> str:
    return (jp_base_url.rstrip("/") + _concrete(pattern)).replace("//", "/")


async def _code(client: Any, path: str, method: str, headers: dict[str, str]) -> int:
    response = await client.fetch(
        path,
        method=method,
        body=b"{}" if method in ("POST", "PUT", "PATCH") else None,
        headers=headers,
        raise_error=False,
        follow_redirects=False,
    )
    return int(response.code)


async def _ws_code(jp_http_port: int, path: str, headers: dict[str, str]) -> int:
    """The HTTP status that answers the websocket handshake (101 when it upgrades)."""
    request = HTTPRequest(f"ws://127.0.0.1:{jp_http_port}{path}", headers=headers)
    try:
        ws = await websocket_connect(request)
    except HTTPClientError as refused:
        return int(refused.code)
    ws.close()
    return 101


def test_routes_are_listed() -> None:
    assert any(pattern.endswith("/j2c/api/config") for pattern, _ in PATTERNS)


@pytest.mark.parametrize(("pattern", "handler"), PATTERNS, ids=[p for p, _ in PATTERNS])
def test_every_method_of_every_route_declares_an_action(pattern: str, handler: type[Any]) -> None:
    actions = declared_actions(handler)
    assert actions, f"{handler.__name__} implements no HTTP method"
    for method, action in actions.items():
        assert action in ACTIONS, f"{handler.__name__}.{method.lower()} declares no action"


def test_a_route_without_an_action_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    class Undeclared(handlers.J2CHandler):
        @web.authenticated
        async def get(self) -> None:
            self.finish("{}")

    monkeypatch.setattr(handlers, "ROUTES", (*ROUTES, handlers.Route(("defaults",), Undeclared)))
    with pytest.raises(TypeError, match="Undeclared: GET declares no action"):
        handlers.routes()


def test_the_table_says_what_each_route_needs() -> None:
    table = {(p.split("/j2c/api/", 1)[1], m): a for p, _, m, a in METHODS}
    assert table == {
        ("config", "GET"): "read",
        ("defaults", "GET"): "read",
        ("preflight", "POST"): "read",
        ("jobs", "GET"): "read",
        ("jobs", "POST"): "execute",
        (f"jobs/{handlers._JOB_ID}", "GET"): "read",
        (f"jobs/{handlers._JOB_ID}", "DELETE"): "write",
        (f"jobs/{handlers._JOB_ID}/cancel", "POST"): "write",
        (f"jobs/{handlers._JOB_ID}/events", "GET"): "read",
        (f"jobs/{handlers._JOB_ID}/sweep", "GET"): "read",
        (f"jobs/{handlers._JOB_ID}/stream", "GET"): "read",
        (f"jobs/{handlers._JOB_ID}/copy-artifacts", "POST"): "write",
        (f"jobs/{handlers._JOB_ID}/artifacts/{handlers._ARTIFACT}/copy", "GET"): "read",
        (f"jobs/{handlers._JOB_ID}/artifacts/{handlers._ARTIFACT}/copy", "POST"): "write",
        (f"jobs/{handlers._JOB_ID}/artifacts/{handlers._ARTIFACT}", "GET"): "read",
    }


@pytest.mark.parametrize(("pattern", "handler"), PATTERNS, ids=[p for p, _ in PATTERNS])
async def test_anonymous_request_is_refused(
    pattern: str, handler: type[Any], http_server_client: Any, jp_http_port: int, jp_base_url: str
) -> None:
    path = _url(jp_base_url, pattern)
    if issubclass(handler, WebSocketHandler):
        assert await _ws_code(jp_http_port, path, {}) in (302, 401, 403)
        return
    for method in ("GET", "POST", "DELETE"):
        code = await _code(http_server_client, path, method, {})
        # 405 means the route has no such method, which refuses as well.
        assert code in (302, 401, 403, 405), (method, path, code)


@pytest.mark.parametrize(
    ("pattern", "handler", "method", "action"),
    METHODS,
    ids=[f"{m} {p}" for p, _, m, _ in METHODS],
)
async def test_read_only_identity_gets_only_the_reads(
    pattern: str,
    handler: type[Any],
    method: str,
    action: str,
    http_server_client: Any,
    jp_http_port: int,
    jp_base_url: str,
    jp_auth_header: dict[str, str],
) -> None:
    """The same authenticated request passes authorization while everything is allowed, and
    with only ``read`` allowed is a 403 exactly where the route needs more than ``read``."""
    path = _url(jp_base_url, pattern)

    async def status() -> int:
        if issubclass(handler, WebSocketHandler):
            return await _ws_code(jp_http_port, path, jp_auth_header)
        return await _code(http_server_client, path, method, jp_auth_header)

    allowed = await status()
    assert allowed != 403, (method, path)
    assert (action, AUTH_RESOURCE) in SwitchableAuthorizer.asked

    _only(READ)
    code = await status()
    assert (action, AUTH_RESOURCE) in SwitchableAuthorizer.asked
    if action == READ:
        assert code == allowed, (method, path, code)
    else:
        assert code == 403, (method, path, code)


async def test_websocket_asks_the_authorizer_before_the_upgrade(
    jp_ws_fetch: Any, jp_fetch: Any, project: Path
) -> None:
    record = await submit(jp_fetch)
    await follow(jp_ws_fetch, record.id)
    _only()  # nothing allowed, not even read
    with pytest.raises(HTTPClientError) as refused:
        await jp_ws_fetch("j2c", "api", "jobs", record.id, "stream")
    assert refused.value.code == 403
    assert SwitchableAuthorizer.asked == [(READ, AUTH_RESOURCE)]


async def test_read_only_identity_reads_everything_and_changes_nothing(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path
) -> None:
    """A real finished job, then a read-only identity: every read works (REST and the
    websocket), every change is a 403 and leaves the job, its artifact and the project alone."""
    record = await submit(jp_fetch)
    streamed = await follow(jp_ws_fetch, record.id)
    job = ("j2c", "api", "jobs", record.id)
    _only(READ)

    config = json.loads((await jp_fetch("j2c", "api", "config")).body)
    assert config["version"]
    jobs = json.loads((await jp_fetch("j2c", "api", "jobs")).body)
    assert [j["id"] for j in jobs] == [record.id]
    done = JobRecord.model_validate_json((await jp_fetch(*job)).body)
    assert done.status == JobStatus.succeeded
    events = json.loads((await jp_fetch(*job, "events")).body)
    assert len(events) == len(streamed)
    artifact = await jp_fetch(*job, "artifacts", "result.txt")
    assert artifact.body == b"done"
    plan = await jp_fetch("j2c", "api", "preflight", method="POST", body=json.dumps(job_body()))
    assert json.loads(plan.body)["entry"]["target"] == "train.py"
    assert [e.seq for e in await follow(jp_ws_fetch, record.id)] == [e.seq for e in streamed]

    refused: list[tuple[str, int]] = []
    for parts, method in [
        (("j2c", "api", "jobs"), "POST"),
        ((*job, "cancel"), "POST"),
        ((*job, "artifacts", "result.txt", "copy"), "POST"),
        ((*job, "copy-artifacts"), "POST"),
        (job, "DELETE"),
    ]:
        body = json.dumps(job_body()) if parts[-1] == "jobs" else "{}" if method == "POST" else None
        with pytest.raises(HTTPClientError) as error:
            await jp_fetch(*parts, method=method, body=body)
        refused.append((method, error.value.code))
    assert [code for _, code in refused] == [403] * 5, refused

    SwitchableAuthorizer.allowed = None
    jobs_after = json.loads((await jp_fetch("j2c", "api", "jobs")).body)
    assert [j["id"] for j in jobs_after] == [record.id]
    assert JobRecord.model_validate_json((await jp_fetch(*job)).body).status == JobStatus.succeeded
    assert not (project / "result.txt").exists()
    assert sorted(p.name for p in project.iterdir()) == ["helpers", "train.py"]
