"""What a job writes in its working copy comes back from a real podman container: the platform
image's own ``j2c-unpack`` scans the copy and uploads into the embedded ``file://`` store
(mounted into the container), and the server lists and serves it from the store's index."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.results.test_outputs_every_backend import (
    CHECKPOINTS,
    HELPER,
    WRITE_IN_WORKING_COPY,
    _cancel_mid_run_keeps_checkpoints,
    _check_working_copy_outputs,
    _run,
)
from tests.support.jobs import settle
from tests.support.podman import Podman


@pytest.fixture
def jp_server_config(podman: Podman, jp_server_config: dict[str, Any]) -> dict[str, Any]:
    overrides = {
        "default_image": podman.image,
        "storage": {"shared": True},  # the job's uid reads and writes the store
        "scheduler": {"container": {"socket": podman.socket, "cancel_grace_s": 5}},
        "outputs": {"max_file_mb": 2, "sync_every_minutes": 0.02},
    }
    return {**jp_server_config, "J2CApp": {"settings_overrides": overrides}}


@pytest.fixture
def container_project(project: Path) -> Path:
    (project / "working.py").write_text(WRITE_IN_WORKING_COPY)
    (project / "checkpoints.py").write_text(CHECKPOINTS)
    (project / "helper.py").write_text(HELPER)
    (project / "data").mkdir()
    (project / "data" / "table.csv").write_text("a,b\n1,2\n")
    settle(project)
    return project


async def test_container_job_returns_what_it_wrote_in_its_working_copy(
    jp_fetch: Any, jp_ws_fetch: Any, container_project: Path
) -> None:
    job = await _run(jp_fetch, jp_ws_fetch, call_path="proj/working.py", scheduler="container")
    await _check_working_copy_outputs(jp_fetch, job)


async def test_container_job_cancelled_mid_run_keeps_its_checkpoints(
    jp_fetch: Any, jp_ws_fetch: Any, container_project: Path, j2c_data_dir: Path
) -> None:
    def store_outputs(job_id: str) -> Path:
        return j2c_data_dir / "store" / "jobs" / job_id / "outputs"

    await _cancel_mid_run_keeps_checkpoints(
        jp_fetch, jp_ws_fetch, store_outputs, scheduler="container"
    )
