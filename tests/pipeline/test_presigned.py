"""``storage.presign_for_jobs``: the job gets presigned URLs, never storage credentials, and
nothing the API shows carries a usable signature. Runs against a real moto S3 server."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from j2c_server.config import J2CSettings, load_settings
from j2c_server.core.job_env import MASK
from j2c_server.jobs.send.inputs import job_spec, presigned_manifest
from j2c_server.jobs.service import JobService
from j2c_server.pack import PackSpec, make_manifest, pack, publish
from j2c_server.schedulers import scheduler_class
from j2c_server.schedulers.slurm.job import batch_script
from j2c_server.schedulers.slurm.settings import SlurmSettings
from j2c_server.storage import open_store
from j2c_server.storage.base import ObjectStore
from j2c_server.storage.post_upload import ENV_NAME as POST_POLICY_ENV
from j2c_server.wire.api import JobRecord, JobRequest, JobStatus
from j2c_server.wire.manifest import Manifest
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
    # The signed URL of the per-job manifest reaches the job by reference, not on its command
    # line (which the scheduler keeps and shows).
    assert command[3] == "env:J2C_MANIFEST_URL"
    # Its outputs go up through its upload policy, masked wherever the spec is shown.
    assert command[command.index("--output-uri") + 1] == f"{s3_bucket.url}/jobs/{record.id}/outputs"
    # Pinned to the bytes of the per-job manifest: another writer of the bucket cannot swap it.
    stored = (
        s3_bucket.client()
        .get_object(Bucket=s3_bucket.bucket, Key=s3_bucket.key(f"jobs/{record.id}/manifest.json"))[
            "Body"
        ]
        .read()
    )
    assert command[4:6] == ["--manifest-digest", "sha256:" + hashlib.sha256(stored).hexdigest()]
    env = final.stages["configure"].output["spec"]["env"]
    assert env["J2C_STORAGE__ENDPOINT_URL"] == s3_bucket.endpoint
    assert not [name for name in env if name.startswith("AWS_")]
    assert env[POST_POLICY_ENV] == MASK
    assert env["J2C_MANIFEST_URL"] == MASK
    shown = final.model_dump_json() + "".join(e.model_dump_json() for e in events)
    assert FAKE_SECRET_ACCESS_KEY not in shown
    assert "X-Amz-Signature=" not in shown.replace("X-Amz-Signature=REDACTED", "")


WRITES_PY = """\
import os, pathlib
os.makedirs("models", exist_ok=True)
pathlib.Path("models/a.bin").write_bytes(bytes(range(256)) * 4)
pathlib.Path("metrics.json").write_text('{"loss": 0.5}')
"""


async def test_a_presigned_job_returns_what_it_wrote_through_its_upload_policy(
    j2c_data_dir: Path, tmp_path: Path, s3_bucket: S3Target
) -> None:
    """Outputs come back from a presigned job: listed with their relative paths and sha256,
    stored under the job's own prefix, and no note that they need store access."""
    project = tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text(WRITES_PY)
    storage = s3_bucket.settings.model_copy(update={"url": s3_bucket.url, "presign_for_jobs": True})
    service = JobService(J2CSettings(storage=storage))
    try:
        record = await service.submit(JobRequest(code_path=str(project), call_path="train.py"))
        final = await asyncio.wait_for(service.wait(record.id), 120)
    finally:
        await service.stop()
    assert final.status == JobStatus.succeeded, final.message
    assert final.results is not None
    model = bytes(range(256)) * 4
    listed = {a.name: a.sha256 for a in final.results.artifacts}
    assert listed == {
        "metrics.json": hashlib.sha256(b'{"loss": 0.5}').hexdigest(),
        "models/a.bin": hashlib.sha256(model).hexdigest(),
    }
    assert final.results.outputs_note is None
    key = s3_bucket.key(f"jobs/{record.id}/outputs/models/a.bin")
    stored = s3_bucket.client().get_object(Bucket=s3_bucket.bucket, Key=key)["Body"].read()
    assert stored == model


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


def _record(scheduler: str, project: Path) -> JobRecord:
    now = time.time()
    request = JobRequest(code_path=str(project), call_path="train.py", image="platform:1")
    return JobRecord(
        id="job-1",
        name="pinned",
        key="k",
        status=JobStatus.pending,
        request=request,
        scheduler=scheduler,
        created_at=now,
        updated_at=now,
    )


async def _published(store: ObjectStore, project: Path, cache: Path) -> Manifest:
    result = pack(PackSpec(code_path=project, call_path="train.py"), cache)
    manifest = make_manifest(result)
    await publish(store, result, manifest)
    return manifest


async def test_a_presigned_manifest_swapped_in_the_bucket_is_refused_by_the_job(
    j2c_data_dir: Path, tmp_path: Path, s3_bucket: S3Target
) -> None:
    """Another user of the bucket replaces a queued job's ``jobs/<id>/manifest.json`` (their
    own entry point's env, the digests consistent): the job the server configured refuses it."""
    project = tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text(TRAIN_PY)
    storage = s3_bucket.settings.model_copy(update={"url": s3_bucket.url, "presign_for_jobs": True})
    settings = J2CSettings(storage=storage)
    store = open_store(s3_bucket.url, storage)
    try:
        manifest = await _published(store, project, tmp_path / "cache")
        url, digest = await presigned_manifest(settings, store, manifest, "job-1")
    finally:
        await store.close()
    spec = job_spec(settings, _record("local", project), url, store, manifest_digest=digest)
    key = s3_bucket.key("jobs/job-1/manifest.json")
    client = s3_bucket.client()
    genuine = client.get_object(Bucket=s3_bucket.bucket, Key=key)["Body"].read()
    assert digest == "sha256:" + hashlib.sha256(genuine).hexdigest()
    swapped = json.loads(genuine)
    swapped["env"] = {"PYTHONSTARTUP": "/tmp/theirs.py"}
    body = json.dumps(swapped).encode()
    client.put_object(Bucket=s3_bucket.bucket, Key=key, Body=body)

    done = subprocess.run(
        spec.command,
        env={**os.environ, **spec.env, **spec.secret_env},  # as the scheduler hands them over
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 65, done.stderr
    theirs = "sha256:" + hashlib.sha256(body).hexdigest()
    assert f"is {theirs}, not the {digest} this job was given" in done.stderr
    assert "j2c: downloading" not in done.stderr
    assert "X-Amz-Signature" not in done.stderr


@pytest.mark.parametrize("scheduler", ["local", "slurm", "kubernetes", "container"])
async def test_every_backend_passes_the_manifest_digest_unchanged(
    j2c_data_dir: Path, tmp_path: Path, scheduler: str
) -> None:
    """The job's own document (what the dry run shows, what is submitted) carries
    ``--manifest-digest`` right after the manifest, as ``job_spec`` made it."""
    settings = load_settings()
    store = open_store(settings.storage_url(), settings.storage)
    digest = "sha256:" + "5e" * 32
    uri = store.uri(f"manifests/sha256/{digest[7:]}.json")
    spec = job_spec(settings, _record(scheduler, tmp_path), uri, store, manifest_digest=digest)
    await store.close()
    pinned = spec.command.index("--manifest-digest")
    assert spec.command[pinned - 1 : pinned + 2] == [uri, "--manifest-digest", digest]
    if scheduler == "slurm":
        section = settings.scheduler.section("slurm", SlurmSettings)
        script = batch_script(spec, section, tmp_path / "run")
        assert f"--manifest-digest {digest}" in script
        return
    native = scheduler_class(scheduler).native_spec(spec, settings)
    if native is None:  # local: the JobSpec itself is what runs
        command = spec.command
    elif scheduler == "kubernetes":
        command = native["spec"]["template"]["spec"]["containers"][0]["command"]
    else:
        body = native["body"]
        command = [*body["Entrypoint"], *body["Cmd"]]
    at = command.index("--manifest-digest")
    assert command[at + 1] == digest
