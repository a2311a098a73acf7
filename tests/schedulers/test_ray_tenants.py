"""Ray keeps a job's entrypoint, runtime_env and metadata and shows them to every client of its
dashboard (``GET /api/jobs/``): a job with credentials (an operator's ``pass_env`` value, a
presigned manifest's signed URL, its outputs upload policy) sends none of them there, and still
gets them (a 0600 file in the user's folder of ``scheduler.ray.secrets_dir``). A preflight on a
cluster that others use says what it exposes. Against the real Ray head of the suite
(``scripts/ray-up.sh``) and the moto S3 server, through the real job service.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from j2c_server.schedulers.ray.backend import RayScheduler
from j2c_server.wire.api import JobRequest, JobStatus
from tests.support.projects import write
from tests.support.ray import RayHead
from tests.support.s3 import S3Target
from tests.support.service_run import run_job

pytestmark = pytest.mark.ray

TOKEN = "hf-value-for-the-job-only"
JOB = """\
import os, pathlib
print("TOKEN OK", os.environ.get("HF_TOKEN") == "hf-value-for-the-job-only", flush=True)
pathlib.Path(os.environ["J2C_OUTPUT_DIR"], "done.txt").write_text("yes")
"""


async def test_a_presigned_job_with_a_credential_shows_ray_none_of_them(
    ray_head: RayHead, tmp_path: Path, s3_bucket: S3Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    write(tmp_path / "project" / "train.py", JOB)
    settings = ray_head.settings(tmp_path / "store", secrets_dir=str(tmp_path / "ray-secrets"))
    storage = s3_bucket.settings.model_copy(update={"url": s3_bucket.url, "presign_for_jobs": True})
    scheduler = settings.scheduler.model_copy(update={"pass_env": ["HF_TOKEN"]})
    settings = settings.model_copy(update={"storage": storage, "scheduler": scheduler})
    request = JobRequest(
        code_path=str(tmp_path / "project"),
        call_path="train.py",
        scheduler="ray",
        env={"HF_TOKEN": ""},
    )

    final, lines = await run_job(settings, request)
    async with httpx.AsyncClient(base_url=ray_head.address) as client:
        listing = (await client.get("/api/jobs/")).text
        job = (await client.get(f"/api/jobs/{final.handle.id if final.handle else ''}")).json()

    assert final.status == JobStatus.succeeded, (final.message, lines[-8:])
    assert "TOKEN OK True" in lines  # the job got its credential
    assert final.results is not None and [a.name for a in final.results.artifacts] == ["done.txt"]
    for shown in (listing, json.dumps(job)):
        assert TOKEN not in shown
        assert "X-Amz-Signature" not in shown and "X-Amz-Credential" not in shown
        assert "J2C_OUTPUTS_POST_CREDENTIAL" not in shown and '"policy"' not in shown
    assert job["entrypoint"].split()[2] == "env:J2C_MANIFEST_URL"
    assert "J2C_SECRETS_FILE" in job["runtime_env"]["env_vars"]
    # Read once the job ended: its credentials file is gone from the user's folder.
    assert list((tmp_path / "ray-secrets").rglob("*.json")) == []


async def test_a_job_with_a_credential_and_no_secrets_dir_is_refused_before_ray_sees_it(
    ray_head: RayHead, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    write(tmp_path / "project" / "train.py", JOB)
    settings = ray_head.settings(tmp_path / "store")
    scheduler = settings.scheduler.model_copy(update={"pass_env": ["HF_TOKEN"]})
    settings = settings.model_copy(update={"scheduler": scheduler})
    request = JobRequest(
        code_path=str(tmp_path / "project"),
        call_path="train.py",
        scheduler="ray",
        env={"HF_TOKEN": ""},
    )

    final, _ = await run_job(settings, request)
    async with httpx.AsyncClient(base_url=ray_head.address) as client:
        listing = (await client.get("/api/jobs/")).text

    assert final.status == JobStatus.failed
    assert "scheduler.ray.secrets_dir" in (final.message or "")
    assert TOKEN not in listing


async def test_a_preflight_on_a_cluster_others_use_says_what_it_exposes(
    ray_head: RayHead, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = ray_head.settings(tmp_path / "store")
    async with httpx.AsyncClient(base_url=ray_head.address) as client:
        sent = await client.post(
            "/api/jobs/",
            json={"entrypoint": "echo another user's job", "metadata": {"j2c_user": "mallory"}},
        )
    assert sent.status_code == 200, sent.text
    monkeypatch.setenv("JUPYTERHUB_USER", "alice")

    notes = await RayScheduler.preflight_notes(settings)

    assert len(notes) == 1
    field, what = notes[0]
    assert field == "scheduler.ray.address"
    assert "shared" in what and "mallory's jobs" in what
    assert "one Ray cluster per trust group" in what
