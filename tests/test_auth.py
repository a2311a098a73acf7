"""Every route the extension registers refuses anonymous requests (HTTP and websocket).

The list comes from ``handlers.routes()`` itself, so a new route is covered without editing
this test.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError
from tornado.websocket import WebSocketHandler, websocket_connect

from j2c_server.handlers import routes

_GROUP = re.compile(r"\(\?P<(\w+)>[^)]*\)")
ROUTES = routes()


def _concrete(pattern: str) -> str:
    """Fill each named group of a route pattern with a harmless value."""
    return _GROUP.sub(lambda m: "0123456789ab", pattern).rstrip("$")


def test_routes_are_listed() -> None:
    assert any(pattern.endswith("/j2c/api/config") for pattern, _ in ROUTES)


@pytest.mark.parametrize(("pattern", "handler"), ROUTES, ids=[p for p, _ in ROUTES])
async def test_anonymous_request_is_refused(
    pattern: str, handler: type[Any], http_server_client: Any, jp_http_port: int, jp_base_url: str
) -> None:
    path = (jp_base_url.rstrip("/") + _concrete(pattern)).replace("//", "/")
    if issubclass(handler, WebSocketHandler):
        with pytest.raises(HTTPClientError) as refused:
            await websocket_connect(f"ws://127.0.0.1:{jp_http_port}{path}")
        assert refused.value.code in (302, 401, 403)
        return
    for method in ("GET", "POST", "DELETE"):
        body = b"{}" if method == "POST" else None
        response = await http_server_client.fetch(
            path,
            method=method,
            body=body,
            raise_error=False,
            follow_redirects=False,
        )
        # 405 means the route has no such method, which refuses as well.
        assert response.code in (302, 401, 403, 405), (method, path, response.code)
