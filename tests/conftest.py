"""Shared fixtures: a real Jupyter server (pytest-jupyter) with j2c loaded, on throw-away dirs.

Fixture modules live in ``tests/support/`` and are loaded here as plugins, so every test folder
can use them.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = [
    "pytest_jupyter.jupyter_server",
    "tests.support.fake_kube",
    "tests.support.s3",
    "tests.support.frontends",
    "tests.support.jobs",
    "tests.support.slurm",
    "tests.support.podman",
    "tests.support.ray",
]


@pytest.fixture(autouse=True)
def _unfreeze_gc() -> Iterator[None]:
    """A test that starts j2c (start_all_extensions) freezes what was alive
    (J2CApp.freeze_startup_objects): given back to the collector after it, so the test process
    does not keep it all, and the next test starts unfrozen."""
    yield
    gc.unfreeze()


@pytest.fixture
def j2c_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Registry, cache and embedded store of one test, never the user's real data dir."""
    data = tmp_path / "j2c-data"
    data.mkdir()
    monkeypatch.setenv("J2C_DATA_DIR", str(data))
    monkeypatch.delenv("J2C_CONFIG", raising=False)
    return data


@pytest.fixture
def jp_server_config(j2c_data_dir: Path) -> dict[str, Any]:
    return {
        "ServerApp": {
            "jpserver_extensions": {"j2c_server": True},
            "allow_unauthenticated_access": False,
            "allow_root": True,
        }
    }


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests on the real Ray head run last: the head (about 1 GB and a tenth of a core
    while idle) starts with the first of them and so is up only at the end of the run."""
    items.sort(key=lambda item: item.get_closest_marker("ray") is not None)
