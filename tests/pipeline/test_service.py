"""JobService behaviour that front ends outside the server rely on (CLI, magic)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

from j2c_server.config import load_settings
from j2c_server.core.j2c_lines import line_tag
from j2c_server.jobs.service import JobService
from j2c_server.registry.job_registry import Registry
from j2c_server.wire.api import EventKind, JobRecord, JobRequest, JobStatus
from tests.support.jobs import TRAIN_PY

_OTHER_PROCESS_WRITER = """
import asyncio, sys
from pathlib import Path
from j2c_server.wire.api import JobStatus
from j2c_server.registry.job_registry import Registry

async def main():
    registry = Registry(Path(sys.argv[1]))
    await registry.events.append(sys.argv[2], [{"kind": "log", "text": "from elsewhere"}])
    await registry.events.append(sys.argv[2], [{"kind": "status", "status": "failed"}],
                          change=lambda r: setattr(r, "status", JobStatus.failed))
    registry.close()

asyncio.run(main())
"""


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "train.py").write_text(TRAIN_PY)
    return root


async def test_dry_run_builds_the_spec_and_records_nothing(
    j2c_data_dir: Path, tmp_path: Path
) -> None:
    project = _project(tmp_path)
    service = JobService(load_settings())
    try:
        spec = await service.dry_run(
            JobRequest(code_path=str(project), call_path="train.py", args=["--lines", "2"])
        )
        assert await service.list_jobs() == []
    finally:
        await service.stop()
    assert spec["command"][1:3] == ["-m", "j2c_server.unpack"]
    # Pinned to the content-addressed manifest it names: the job refuses any other bytes.
    manifest_uri, flag, digest = spec["command"][3:6]
    assert flag == "--manifest-digest" and digest.startswith("sha256:")
    assert manifest_uri.endswith(f"/manifests/sha256/{digest.removeprefix('sha256:')}.json")
    assert spec["command"][-3:] == ["--", "--lines", "2"]
    assert spec["env"] == {"J2C_JOB_ID": "dry-run", "J2C_LINE_TAG": line_tag("dry-run")}


async def test_stream_follows_events_written_by_another_process(
    j2c_data_dir: Path, tmp_path: Path
) -> None:
    settings = load_settings()
    registry = Registry(settings.data_path() / "registry.sqlite3")
    now = time.time()
    record = JobRecord(
        id="other",
        name="x",
        key="k",
        status=JobStatus.running,
        request=JobRequest(code_path="/p", call_path="/p/x.py"),
        scheduler="local",
        created_at=now,
        updated_at=now,
    )
    await registry.jobs.create_or_attach(record, {"kind": EventKind.status, "status": "running"})
    registry.close()
    service = JobService(settings)
    try:
        follower = asyncio.ensure_future(_collect(service, "other"))
        await asyncio.sleep(0.2)
        writer = subprocess.run(
            [sys.executable, "-c", _OTHER_PROCESS_WRITER, str(registry.path), "other"],
            timeout=60,
            check=True,
        )
        assert writer.returncode == 0
        texts = await asyncio.wait_for(follower, 10)
    finally:
        await service.stop()
    assert texts == ["running", "from elsewhere", "failed"]


async def _collect(service: JobService, job_id: str) -> list[str]:
    return [
        e.text if e.kind == EventKind.log else str(e.status.value if e.status else "")
        async for e in service.stream(job_id)
    ]


async def test_wait_returns_the_final_record(j2c_data_dir: Path, tmp_path: Path) -> None:
    project = _project(tmp_path)
    service = JobService(load_settings())
    try:
        record = await service.submit(
            JobRequest(code_path=str(project), call_path="train.py", args=["--lines", "1"])
        )
        final = await asyncio.wait_for(service.wait(record.id), 120)
    finally:
        await service.stop()
    assert final.status == JobStatus.succeeded
    assert final.exit_code == 0
