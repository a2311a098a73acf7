"""No credential value in any spec a scheduler keeps and shows.

A job's credentials: an operator-listed ``scheduler.pass_env`` value, the outputs upload policy
and the signed URL of a presigned manifest (``storage.presign_for_jobs``), and an operator's
backend ``env`` entry whose value holds a password. Each backend's own document (the Kubernetes
Job, also as the fake API server stored it; the Ray job body; the container create request,
also as a GPU job's ``gpu-request.json`` keeps it; the Slurm job and batch script) must carry
none of their values: the job gets them by reference (a Secret, a 0600 file on its own mount).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from j2c_server.config import J2CSettings
from j2c_server.jobs.send.inputs import job_spec
from j2c_server.schedulers.base import JobSpec
from j2c_server.schedulers.container.gpus import GpuWaiter
from j2c_server.schedulers.container.spec import render_create
from j2c_server.schedulers.kubernetes.spec import render_job
from j2c_server.schedulers.ray.backend import job_body
from j2c_server.schedulers.slurm.job import batch_script, job_description
from j2c_server.schedulers.slurm.settings import SlurmSettings
from j2c_server.storage import open_store
from j2c_server.wire.api import JobRecord, JobRequest, JobStatus, Resources
from tests.schedulers.test_kubernetes import connect
from tests.support.fake_kube import FakeKube
from tests.support.podman import Podman
from tests.support.projects import write
from tests.support.service_run import run_job

TOKEN = "hf-token-value-never-shown"
SIGNATURE = "f00dfeedsignaturenevershown"
POLICY = '{"url": "https://bucket.example", "fields": {"signature": "policy-never-shown"}}'
PASSWORD = "db-password-never-shown"
VALUES = (TOKEN, SIGNATURE, "policy-never-shown", PASSWORD)
OPERATOR_ENV = {"DATABASE_URL": f"postgres://trainer:{PASSWORD}@db.example/runs", "MODE": "x"}


def _settings(tmp_path: Path, scheduler: str) -> J2CSettings:
    return J2CSettings.model_validate(
        {
            "data_dir": str(tmp_path / "data"),
            "storage": {"url": (tmp_path / "store").as_uri(), "shared": True},
            "scheduler": {
                "pass_env": ["HF_TOKEN"],
                "gpu_ledger": str(tmp_path / "gpus"),
                "container": {
                    "env": OPERATOR_ENV,
                    "gpus": 1,
                    "socket": str(tmp_path / "no-engine.sock"),
                },
                "slurm": {"env": OPERATOR_ENV, "url": "http://slurm.example", "job_dir": "/j"},
                "ray": {
                    "env": OPERATOR_ENV,
                    "address": "http://ray.example:8265",
                    "secrets_dir": str(tmp_path / "ray-secrets"),
                    "image": "platform:1",
                },
            },
        }
    )


async def _spec(
    tmp_path: Path, scheduler: str, monkeypatch: pytest.MonkeyPatch, **resources: Any
) -> tuple[J2CSettings, JobSpec]:
    """The spec the pipeline's configure stage makes for a presigned job with a pass_env
    credential."""
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    settings = _settings(tmp_path, scheduler)
    now = time.time()
    request = JobRequest(
        code_path=str(tmp_path),
        call_path="train.py",
        image="platform:1",
        env={"HF_TOKEN": "", "SEED": "1"},
        resources=Resources(**resources),
    )
    record = JobRecord(
        id="job-1",
        name="with credentials",
        key="k",
        status=JobStatus.pending,
        request=request,
        scheduler=scheduler,
        created_at=now,
        updated_at=now,
    )
    manifest = (
        "https://bucket.s3.example/j2c/jobs/job-1/manifest.json?X-Amz-Algorithm=AWS4-HMAC-SHA256"
        f"&X-Amz-Credential=AKIDEXAMPLE%2F20260101&X-Amz-Signature={SIGNATURE}"
    )
    store = open_store(settings.storage_url(), settings.storage)
    spec = job_spec(
        settings,
        record,
        manifest,
        store,
        manifest_digest="sha256:" + "5e" * 32,
        outputs_post=POLICY,
    )
    await store.close()
    return settings, spec


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _clean(document: object, what: str) -> None:
    text = json.dumps(document)
    for value in VALUES:
        assert value not in text, f"{what} holds {value}"


async def test_the_kubernetes_job_holds_no_credential(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_kube: FakeKube
) -> None:
    settings, spec = await _spec(tmp_path, "kubernetes", monkeypatch)
    _clean(render_job(spec, settings), "the rendered Job")
    async with connect(fake_kube, tmp_path) as kube:
        await kube.submit(spec)
    (stored,) = fake_kube.jobs.values()
    _clean(stored, "the Job the API server stored")


async def test_the_ray_job_body_holds_no_credential(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, spec = await _spec(tmp_path, "ray", monkeypatch)
    body = job_body(spec, settings)
    _clean(body, "the Ray job body")
    assert "DATABASE_URL" not in body["runtime_env"]["env_vars"]
    assert body["runtime_env"]["env_vars"]["MODE"] == "x"  # the operator's plain env stays


async def test_the_container_create_request_and_gpu_request_hold_no_credential(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, spec = await _spec(tmp_path, "container", monkeypatch, gpus=1)
    _clean(render_create(spec, settings, gpu_devices=[]), "the container create request")
    folder = tmp_path / "job-folder"
    folder.mkdir()
    GpuWaiter(settings).start(spec, folder)  # waits for GPUs with the request it will send
    _clean(json.loads((folder / "gpu-request.json").read_text()), "gpu-request.json")


async def test_the_slurm_job_holds_no_credential(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, spec = await _spec(tmp_path, "slurm", monkeypatch)
    slurm = settings.scheduler.section("slurm", SlurmSettings)
    run_dir = tmp_path / "run"
    _clean(job_description(spec, slurm, run_dir / "output.log"), "the Slurm job")
    _clean(batch_script(spec, slurm, run_dir), "the Slurm batch script")


CONTAINER_JOB = """\
import os, pathlib
print("TOKEN OK", os.environ.get("HF_TOKEN") == "hf-token-value-never-shown", flush=True)
print("UID", os.getuid(), flush=True)
"""


async def test_a_container_job_as_another_uid_reads_its_credential_from_its_own_file(
    podman: Podman, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the real engine: the job (uid 1234, under this root server) gets the value, which is
    neither in its container's create request nor left on disk once its results are read."""
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    write(tmp_path / "project" / "job.py", CONTAINER_JOB)
    settings = podman.settings(tmp_path / "data", user="1234:1234", env=OPERATOR_ENV)
    storage = settings.storage.model_copy(update={"shared": True})
    scheduler = settings.scheduler.model_copy(update={"pass_env": ["HF_TOKEN"]})
    settings = settings.model_copy(update={"storage": storage, "scheduler": scheduler})
    request = JobRequest(
        code_path=str(tmp_path / "project"),
        call_path="job.py",
        scheduler="container",
        image=podman.image,
        env={"HF_TOKEN": ""},
    )

    final, lines = await run_job(settings, request)

    assert final.status == JobStatus.succeeded, (final.message, lines[-8:])
    assert "TOKEN OK True" in lines and "UID 1234" in lines
    left = [p for p in (tmp_path / "data").rglob("*") if p.is_file() and TOKEN in _text(p)]
    assert left == [], left  # nothing of the value stays on this machine after the job
