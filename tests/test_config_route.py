"""GET /j2c/api/config: what the UI may know about the server, and nothing secret."""

from __future__ import annotations

import json
from typing import Any

import pytest

from j2c_server.wire.api import ServerConfig


async def test_config_reports_embedded_defaults(jp_fetch: Any) -> None:
    response = await jp_fetch("j2c", "api", "config")
    assert response.code == 200
    config = ServerConfig.model_validate_json(response.body)
    assert config.storage_kind == "file"
    assert config.default_scheduler == "local"
    assert config.compression_level == 3


async def test_config_never_contains_credentials(
    jp_fetch: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "very-secret-value")
    response = await jp_fetch("j2c", "api", "config")
    assert b"very-secret-value" not in response.body
    assert "secret" not in json.loads(response.body)
