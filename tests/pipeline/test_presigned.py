"""``storage.presign_for_jobs``: the job gets presigned URLs, never storage credentials, and
nothing the API shows carries a usable signature. Runs against a real moto S3 server."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

from j2c_server.config import J2CSettings
from j2c_server.jobs.service import JobService
from j2c_server.models import JobRequest, JobStatus
from tests.support.jobs import TRAIN_PY
from tests.support.s3 import FAKE_SECRET_ACCESS_KEY, S3Target


async def test_presigned_job_runs_and_records_only_redacted_urls(
    j2c_data_dir: Path, tmp_path: Path, s3_bucket: S3Target
) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text(TRAIN_PY)
    storage = s3_bucket.settings.model_copy(update={"url": s3_bucket.url, "presign_for_jobs": True})
    service = JobService(J2CSettings(storage=storage))
    try:
        record = await service.submit(
            JobRequest(code_path=str(project), call_path="train.py", args=["--lines", "2"])
        )
        final = await asyncio.wait_for(service.wait(record.id), 120)
        events = await service.events(record.id)
    finally:
        await service.stop()
    assert final.status == JobStatus.succeeded
    command = final.stages["configure"].output["spec"]["command"]
    assert "X-Amz-Signature=REDACTED" in command[3]
    assert "/jobs/" in command[3]  # the per-job manifest, not the shared one
    assert "--output-uri" not in command  # no credentials: nothing to write with
    env = final.stages["configure"].output["spec"]["env"]
    assert env["J2C_STORAGE__ENDPOINT_URL"] == s3_bucket.endpoint
    assert not [name for name in env if name.startswith("AWS_")]
    shown = final.model_dump_json() + "".join(e.model_dump_json() for e in events)
    assert FAKE_SECRET_ACCESS_KEY not in shown
    assert "X-Amz-Signature=" not in shown.replace("X-Amz-Signature=REDACTED", "")


READ_BIG_PY = """\
import hashlib, pathlib
print("BIG", hashlib.sha256(pathlib.Path("data.bin").read_bytes()).hexdigest(), flush=True)
"""


async def test_a_presigned_job_gets_its_big_files_through_presigned_urls(
    j2c_data_dir: Path, tmp_path: Path, s3_bucket: S3Target
) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text(READ_BIG_PY)
    data = bytes(range(256)) * 8192  # 2 MiB: a big file, its own blob
    (project / "data.bin").write_bytes(data)
    storage = s3_bucket.settings.model_copy(update={"url": s3_bucket.url, "presign_for_jobs": True})
    service = JobService(J2CSettings(storage=storage))
    try:
        record = await service.submit(JobRequest(code_path=str(project), call_path="train.py"))
        final = await asyncio.wait_for(service.wait(record.id), 120)
        events = await service.events(record.id)
    finally:
        await service.stop()
    lines = [e.text or "" for e in events]
    assert final.status == JobStatus.succeeded, lines
    assert f"BIG {hashlib.sha256(data).hexdigest()}" in lines
