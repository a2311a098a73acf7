"""Fixtures of the packer tests: a fresh sample project per test, one shared read-only venv."""

from __future__ import annotations

from pathlib import Path

import pytest

from j2c_server.pack import PackSpec
from tests.support.projects import make_project, make_venv


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path / "project")


@pytest.fixture(scope="session")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Shared by many tests: never modify it (make your own with make_venv)."""
    return make_venv(tmp_path_factory.mktemp("shared-venv") / "venv")


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


@pytest.fixture
def spec(project: Path, venv: Path) -> PackSpec:
    return PackSpec(code_path=project, call_path="train.py", venv_path=venv)
