"""The server's startup objects are moved out of the collector's reach once j2c has started
(a full collection with many jobs printing otherwise walks them all), unless configured off."""

from __future__ import annotations

import gc
from typing import Any

import pytest


@pytest.fixture(params=[True, False], ids=["default", "off"])
def jp_server_config(
    request: pytest.FixtureRequest, jp_server_config: dict[str, Any]
) -> dict[str, Any]:
    if request.param:
        return jp_server_config
    return {**jp_server_config, "J2CApp": {"freeze_startup_objects": False}}


async def test_startup_objects_are_frozen_unless_configured_off(
    jp_serverapp: Any, jp_server_config: dict[str, Any]
) -> None:
    assert gc.get_freeze_count() == 0
    # What the server does once its loop runs (pytest-jupyter starts no loop of its own).
    await jp_serverapp.extension_manager.start_all_extensions()
    if "J2CApp" in jp_server_config:
        assert gc.get_freeze_count() == 0
    else:
        assert gc.get_freeze_count() > 10_000  # modules, classes, the server's config
