"""A real one-node Ray head for the tests marked ``ray``.

``scripts/ray-up.sh`` starts it (installing Ray into ``.ray-venv`` the first time: Ray's pins
stay out of the project's venv) with 2 CPUs, one fake GPU and an ``accelerator_type:FAKE``
resource; ``scripts/ray-down.sh`` stops exactly its processes at the end. When ``J2C_RAY_DIR``
names a head that is already up (its ``DIR/env``), that one is used and left running. The
tests are skipped, with the script's reason, only when Ray cannot be installed here.

The head is this machine, so a ``file://`` store and a shared folder are seen by its jobs, and
its jobs find this checkout's ``j2c-unpack`` (ray-up.sh puts it beside ``ray``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from j2c_server.config import J2CSettings
from tests.support.exports import parse_exports

REPO = Path(__file__).resolve().parents[2]
RAY_UP = REPO / "scripts" / "ray-up.sh"
RAY_DOWN = REPO / "scripts" / "ray-down.sh"
NOT_INSTALLABLE = 2  # ray-up.sh's exit code when Ray cannot be installed


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


def _parse(text: str) -> RayHead:
    values = parse_exports(text)
    return RayHead(address=values["J2C_SCHEDULER__RAY__ADDRESS"], bin=Path(values["J2C_RAY_BIN"]))


@pytest.fixture(scope="session")
def ray_head() -> Iterator[RayHead]:
    exported = Path(os.environ.get("J2C_RAY_DIR") or "/nonexistent") / "env"
    if exported.is_file():
        yield _parse(exported.read_text())
        return
    directory = Path(tempfile.mkdtemp(prefix="j2c-ray-head-"))
    started = subprocess.run(
        [RAY_UP, directory], capture_output=True, text=True, timeout=900, check=False
    )
    if started.returncode == NOT_INSTALLABLE:
        shutil.rmtree(directory, ignore_errors=True)
        pytest.skip(f"no Ray here: {started.stderr.strip().splitlines()[-1]}")
    if started.returncode != 0:
        subprocess.run([RAY_DOWN, directory], timeout=120, check=False)
        shutil.rmtree(directory, ignore_errors=True)
        pytest.fail(f"scripts/ray-up.sh failed:\n{started.stderr}")
    try:
        yield _parse(started.stdout)
    finally:
        subprocess.run([RAY_DOWN, directory], timeout=120, check=False)
        shutil.rmtree(directory, ignore_errors=True)
