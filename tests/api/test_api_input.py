"""Bad input to the REST and websocket routes: a 4xx that names the field, and nothing created.

Paths are confined to the server's root folder: ``..``, absolute paths elsewhere and symlinks
that lead out are refused with 403.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from tests.support.jobs import follow, job_body, submit


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
        # The server's default (local) backend sets no CPU or memory limit: refused, not ignored.
        ({"resources": {"cpus": 2}}, "resources.cpus"),
        ({"resources": {"memory": "1G"}}, "resources.memory"),
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


BAD_INTEGERS = ["²", "99999999999999999999999", "9223372036854775808", "-1", "1.5", "0x10", ""]


async def test_bad_after_or_limit_on_the_events_route_is_a_400_naming_it(
    jp_fetch: Any, project: Path
) -> None:
    record = await submit(jp_fetch)
    answers: dict[tuple[str, str], tuple[int, str]] = {}
    for name, raw in [
        *(("after", raw) for raw in BAD_INTEGERS),
        *(("limit", raw) for raw in [*BAD_INTEGERS, "0", "10001"]),
    ]:
        code, body = await _refused(
            jp_fetch, "j2c", "api", "jobs", record.id, "events", params={name: raw}
        )
        assert name in body["message"]
        answers[name, raw] = (code, body["field"])
    assert set(answers.values()) == {(400, "after"), (400, "limit")}, answers
    assert all(field == name for (name, _), (_, field) in answers.items())


async def test_largest_after_and_limit_are_accepted(jp_fetch: Any, project: Path) -> None:
    record = await submit(jp_fetch)
    response = await jp_fetch(
        "j2c",
        "api",
        "jobs",
        record.id,
        "events",
        params={"after": str(2**63 - 1), "limit": "10000"},
    )
    assert json.loads(response.body) == []


async def test_bad_after_on_the_websocket_is_a_400_before_the_upgrade(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path
) -> None:
    record = await submit(jp_fetch)
    for raw in ["²", "99999999999999999999999", "-1"]:
        with pytest.raises(HTTPClientError) as refused:
            await jp_ws_fetch("j2c", "api", "jobs", record.id, "stream", params={"after": raw})
        assert refused.value.code == 400, raw
        response = refused.value.response
        assert response is not None
        assert json.loads(response.body)["field"] == "after"


async def test_a_failing_stream_ends_with_a_close_the_client_sees(
    jp_fetch: Any, jp_ws_fetch: Any, jp_serverapp: Any, project: Path, monkeypatch: Any
) -> None:
    """A bug behind the socket is a 1011 close with a reason, not a sender that dies while the
    client waits forever."""
    record = await submit(jp_fetch)
    service = jp_serverapp.web_app.settings["j2c_service"]

    async def broken(job_id: str, after: int = 0) -> Any:
        raise RuntimeError("registry exploded")
        yield  # an async generator, like the real one

    monkeypatch.setattr(service, "stream_wire", broken)
    ws = await jp_ws_fetch("j2c", "api", "jobs", record.id, "stream")
    assert await asyncio.wait_for(ws.read_message(), 10) is None
    assert ws.close_code == 1011
    assert ws.close_reason and "internal error" in ws.close_reason


@pytest.mark.parametrize("route", ["jobs", "preflight"])
async def test_body_over_the_cap_is_a_413(jp_fetch: Any, project: Path, route: str) -> None:
    body = json.dumps(job_body()) + " " * (1 << 20)  # valid JSON, 1 MiB and a bit
    code, reply = await _refused(jp_fetch, "j2c", "api", route, body=body)
    assert (code, reply["field"]) == (413, "body")
    assert "limit" in reply["message"]
    assert await _no_jobs(jp_fetch)


async def test_chunked_body_over_the_cap_is_a_413(jp_fetch: Any, project: Path) -> None:
    async def produce(write: Any) -> None:
        await write(json.dumps(job_body()).encode())
        for _ in range(1100):
            await write(b" " * 1024)

    with pytest.raises(HTTPClientError) as refused:
        await jp_fetch("j2c", "api", "jobs", method="POST", body_producer=produce)
    assert refused.value.code == 413
    assert await _no_jobs(jp_fetch)


async def test_body_under_the_cap_is_accepted(jp_fetch: Any, project: Path) -> None:
    body = json.dumps(job_body()) + " " * 1_000_000
    assert len(body) < 1 << 20
    response = await jp_fetch("j2c", "api", "preflight", method="POST", body=body)
    assert response.code == 200


async def test_event_listing_pages_by_default(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path
) -> None:
    record = await submit(jp_fetch, args=["--lines", "1100"])
    streamed = await follow(jp_ws_fetch, record.id)
    assert len(streamed) > 1000
    events = ("j2c", "api", "jobs", record.id, "events")
    first = json.loads((await jp_fetch(*events)).body)
    assert [e["seq"] for e in first] == list(range(1, 1001))
    rest = json.loads((await jp_fetch(*events, params={"after": "1000"})).body)
    assert [e["seq"] for e in first + rest] == [e.seq for e in streamed]
    small = json.loads((await jp_fetch(*events, params={"after": "10", "limit": "5"})).body)
    assert [e["seq"] for e in small] == [11, 12, 13, 14, 15]


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def server_log(jp_serverapp: Any) -> Iterator[_Records]:
    """Every line the server's loggers (the app's and tornado's) write during the test."""
    records = _Records()
    loggers = [jp_serverapp.log, *(logging.getLogger(n) for n in ("tornado", "j2c_server"))]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(records)
        logger.setLevel(logging.DEBUG)
    yield records
    for logger, level in zip(loggers, levels, strict=True):
        logger.removeHandler(records)
        logger.setLevel(level)


async def test_log_lines_redact_the_token_in_the_url(
    jp_fetch: Any,
    jp_ws_fetch: Any,
    jp_serverapp: Any,
    project: Path,
    server_log: _Records,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A browser may put ``?token=`` in the URL; j2c's own log lines about a request (bad
    input, a failing route, a failing stream) show it as ``[secret]``."""
    token = jp_serverapp.identity_provider.token
    auth = {"token": token}
    record = await submit(jp_fetch)
    job = ("j2c", "api", "jobs", record.id)
    await _refused(jp_fetch, *job, "events", params={"after": "²", **auth})
    with pytest.raises(HTTPClientError):
        await jp_ws_fetch(*job, "stream", params={"after": "-1", **auth})

    service = jp_serverapp.web_app.settings["j2c_service"]

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("registry exploded")
        yield  # an async generator, like the real stream

    async def broken_page(*args: Any) -> Any:
        raise RuntimeError("registry exploded")

    monkeypatch.setattr(service, "jobs_page", broken_page)
    monkeypatch.setattr(service, "stream_wire", broken)
    with pytest.raises(HTTPClientError) as failed:
        await jp_fetch("j2c", "api", "jobs", params=auth)
    assert failed.value.code == 500
    ws = await jp_ws_fetch(*job, "stream", params=auth)
    assert await asyncio.wait_for(ws.read_message(), 10) is None

    mine = [line for line in server_log.lines if "j2c/api" in line and "token=" in line]
    assert len(mine) >= 4, server_log.lines
    assert any(line.startswith("Uncaught exception GET") for line in mine), mine
    assert all("token=[secret]" in line for line in mine), mine
    assert not [line for line in server_log.lines if token in line]


async def test_oversized_body_is_refused_before_it_is_sent(
    http_server_client: Any, jp_http_port: int, jp_base_url: str, jp_auth_header: dict[str, str]
) -> None:
    """A declared 100 MB body gets its 413 right after the headers: the server does not wait
    for (or hold) a byte of it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", jp_http_port)
    try:
        head = (
            f"POST {jp_base_url}j2c/api/jobs HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{jp_http_port}\r\n"
            f"Authorization: {jp_auth_header['Authorization']}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {100 << 20}\r\n\r\n"
        )
        writer.write(head.encode())
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(65536), 10)
    finally:
        writer.close()
    assert answer.startswith(b"HTTP/1.1 413")
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["field"] == "body"
