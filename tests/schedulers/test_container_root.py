"""The container backend where lab containers run it: a Jupyter server running as root, its
data dir (and so the embedded store) under ``/root``, which is 0700 in the platform image too.

The job's store files are mounted under ``/j2c/store`` and ``j2c-unpack`` is handed those paths:
had they been mounted at their host paths, the job's non-root uid could not traverse the image's
``/root`` and every job would fail with exit 66 ("the manifest ... cannot be read").
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from j2c_server.wire.api import JobRecord, JobStatus
from tests.support.jobs import final_status, follow, log_lines, submit
from tests.support.podman import Podman

ROOT_HOME = Path("/root")


@pytest.fixture
def j2c_data_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``/root/j2c-test-<id>/jupyter/j2c``: private folders under root's home, as a root
    server's default data dir (``/root/.local/share/jupyter``) is."""
    if os.geteuid() != 0 or not ROOT_HOME.is_dir():
        pytest.skip("needs to run as root, with /root: the case is a root server's data dir")
    top = ROOT_HOME / f"j2c-test-{uuid.uuid4().hex[:8]}"
    data = top / "jupyter" / "j2c"
    data.mkdir(parents=True, mode=0o700)
    for folder in (top, top / "jupyter", data):
        folder.chmod(0o700)
    monkeypatch.setenv("J2C_DATA_DIR", str(data))
    monkeypatch.delenv("J2C_CONFIG", raising=False)
    try:
        yield data
    finally:
        shutil.rmtree(top, ignore_errors=True)


@pytest.fixture
def jp_server_config(podman: Podman, jp_server_config: dict[str, Any]) -> dict[str, Any]:
    overrides = {
        "default_image": podman.image,
        # What the preflight asks of a root server whose jobs run as 1000:1000.
        "storage": {"shared": True},
        "scheduler": {"container": {"socket": podman.socket}},
    }
    return {**jp_server_config, "J2CApp": {"settings_overrides": overrides}}


async def test_a_root_server_with_its_data_dir_under_root_runs_container_jobs(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path, j2c_data_dir: Path
) -> None:
    record = await submit(jp_fetch, scheduler="container", args=["--lines", "3"])
    events = await follow(jp_ws_fetch, record.id)
    assert final_status(events) == JobStatus.succeeded, "\n".join(str(e.text) for e in events)
    assert log_lines(events)[1:] == ["line 0", "line 1", "line 2"]
    done = JobRecord.model_validate_json((await jp_fetch("j2c", "api", "jobs", record.id)).body)
    assert done.exit_code == 0 and done.results is not None
    assert [a.name for a in done.results.artifacts] == ["result.txt"]
    # Uploaded by the job through its in-container path, found by the server at the host's.
    uploaded = j2c_data_dir / "store" / "jobs" / record.id / "outputs" / "result.txt"
    assert uploaded.read_text() == "done"
