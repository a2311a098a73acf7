"""A real container engine for the container scheduler's tests: podman's Docker Engine API.

Uses the service that ``scripts/platform-image.sh`` started when ``$J2C_PODMAN_DIR/env`` holds
its exports (``scripts/test.sh`` does that); otherwise runs the script once per session (it
builds the platform image, or reuses it, and starts the service) and stops the service at the end.
The tests are skipped, with the script's reason, only when podman cannot be installed here,
and fail instead under CI (tests/support/ci.py). A ``$J2C_PODMAN_DIR`` whose service does not
answer is a failure too: a dead socket must not pass for an engine.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from j2c_server.config import J2CSettings, load_settings
from tests.support.ci import engine_missing
from tests.support.exports import parse_exports

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "platform-image.sh"


@dataclass(frozen=True)
class Podman:
    socket: str
    image: str

    def settings(self, data_dir: Path, **container: Any) -> J2CSettings:
        store = data_dir / "store"
        return load_settings(
            environ={},
            overrides={
                "data_dir": str(data_dir),
                "storage": {"url": store.as_uri()},
                "scheduler": {"container": {"socket": self.socket, **container}},
            },
        )


def _not_answering(socket: str) -> str | None:
    """Why the engine at ``socket`` does not answer ``GET /_ping``, or None when it does."""
    try:
        transport = httpx.HTTPTransport(uds=socket)
        with httpx.Client(transport=transport, base_url="http://engine", timeout=30) as client:
            answer = client.get("/_ping")
    except httpx.HTTPError as exc:
        return f"does not answer ({exc})"
    return None if answer.status_code == 200 else f"answers {answer.status_code} to /_ping"


@pytest.fixture(scope="session")
def podman() -> Iterator[Podman]:
    started_by_ci = Path(os.environ.get("J2C_PODMAN_DIR", "/nonexistent")) / "env"
    if started_by_ci.is_file():
        values = parse_exports(started_by_ci.read_text())
        os.environ["CONTAINERS_CONF"] = values["CONTAINERS_CONF"]
        socket = values["J2C_SCHEDULER__CONTAINER__SOCKET"]
        if (why := _not_answering(socket)) is not None:
            pytest.fail(f"{started_by_ci} names podman's service at {socket}, which {why}")
        yield Podman(socket, values["PLATFORM_IMAGE"])
        return
    folder = Path(os.environ.get("TMPDIR", "/tmp")) / f"j2c-podman-tests-{os.getpid()}"
    started = subprocess.run(
        ["bash", str(SCRIPT), str(folder)], capture_output=True, text=True, timeout=900
    )
    if started.returncode == 2:
        engine_missing(f"no podman here: {started.stderr.strip().splitlines()[-1]}")
    assert started.returncode == 0, started.stderr[-3000:]
    values = parse_exports(started.stdout)
    os.environ["CONTAINERS_CONF"] = values["CONTAINERS_CONF"]
    try:
        yield Podman(values["J2C_SCHEDULER__CONTAINER__SOCKET"], values["PLATFORM_IMAGE"])
    finally:
        subprocess.run(["bash", str(SCRIPT), str(folder), "--stop"], check=False)
