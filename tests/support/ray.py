"""A real one-node Ray head for the tests marked ``ray``.

``scripts/ray-up.sh`` starts it (installing Ray into ``.ray-venv`` the first time: Ray's pins
stay out of the project's venv) with 2 CPUs, one fake GPU and an ``accelerator_type:FAKE``
resource; ``scripts/ray-down.sh`` stops exactly its processes at the end. When ``J2C_RAY_DIR``
names a head that is already up (its ``DIR/env``), that one is used and left running. The
tests are skipped, with the script's reason, only when Ray cannot be installed here, and fail
instead under CI (tests/support/ci.py).

The head is this machine, so a ``file://`` store and a shared folder are seen by its jobs, and
its jobs find this checkout's ``j2c-unpack`` (ray-up.sh puts it beside ``ray``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from j2c_server.config import J2CSettings
from tests.support.exports import parse_exports, started_service

REPO = Path(__file__).resolve().parents[2]
RAY_UP = REPO / "scripts" / "ray-up.sh"
RAY_DOWN = REPO / "scripts" / "ray-down.sh"


@dataclass
class RayHead:
    address: str  # the dashboard's URL (scheduler.ray.address)
    bin: Path  # Ray's venv's bin folder (ray, and this checkout's j2c-unpack)

    def settings(self, store: Path, **ray: Any) -> J2CSettings:
        """Settings for the ``ray`` backend on this head with a ``file://`` store its jobs
        read; keywords override ``scheduler.ray`` keys."""
        values: dict[str, Any] = {"address": self.address, "poll_interval_s": 0.1}
        values.update(ray)
        return J2CSettings.model_validate(
            {
                "data_dir": str(store.parent / "data"),
                "storage": {"url": store.as_uri(), "shared": True},
                "scheduler": {"ray": values},
            }
        )


def _parse(values: dict[str, str]) -> RayHead:
    return RayHead(address=values["J2C_SCHEDULER__RAY__ADDRESS"], bin=Path(values["J2C_RAY_BIN"]))


@pytest.fixture(scope="session")
def ray_head() -> Iterator[RayHead]:
    exported = Path(os.environ.get("J2C_RAY_DIR") or "/nonexistent") / "env"
    if exported.is_file():
        yield _parse(parse_exports(exported.read_text()))
        return
    with started_service(RAY_UP, RAY_DOWN, "Ray") as exports:
        yield _parse(exports)
