"""A job's outputs listed and downloadable for every backend, from the outputs index that
``j2c-unpack`` writes next to them in the store.

Each job runs for real: packed, stored, submitted through the real Jupyter server, run by the
real ``j2c-unpack``, which uploads ``$J2C_OUTPUT_DIR`` and the index. Slurm is a real Slurm on
this machine (``storage.shared``: its node is this machine); Kubernetes is the fake API server
of ``tests/support/fake_kube.py`` with the test as its kubelet — it runs the pod's command, as
the container would, against a real (moto) S3 bucket — so the download goes through the store.
Neither scheduler returns any outputs itself: what is listed comes from the index alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from j2c_server.wire.api import JobRecord, JobStatus
from tests.support.fake_kube import FakeKube, write_kubeconfig
from tests.support.jobs import follow, settle, submit
from tests.support.s3 import S3Target
from tests.support.slurm import SlurmCluster

REPO = Path(__file__).resolve().parents[2]
METRICS = '{"accuracy": 0.93}\n'
WEIGHTS = bytes(range(256)) * 40
NOTEBOOK = '{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}\n'

WRITE_OUTPUTS = f"""\
import os, sys
out = os.environ["J2C_OUTPUT_DIR"]
with open(os.path.join(out, "metrics.json"), "w") as f:
    f.write({METRICS!r})
if "--fail" in sys.argv:
    sys.exit(3)  # after writing one output
os.makedirs(os.path.join(out, "model"))
with open(os.path.join(out, "model", "weights.bin"), "wb") as f:
    f.write({WEIGHTS!r})
if "--notebook" in sys.argv:
    with open(os.path.join(out, "report.ipynb"), "w") as f:
        f.write({NOTEBOOK!r})
"""

NO_OUTPUTS = "print('nothing to keep', flush=True)\n"

MODEL = bytes(range(256)) * 64
# Where a third-party script writes: relative to its working directory, no $J2C_OUTPUT_DIR.
WRITE_IN_WORKING_COPY = f"""\
import os, pathlib
os.makedirs("models", exist_ok=True)
pathlib.Path("models/a.bin").write_bytes({MODEL!r})
pathlib.Path("metrics.json").write_text({METRICS!r})
with open("data/table.csv", "a") as f:
    f.write("3,4\\n")
import helper  # leaves __pycache__/helper.*.pyc
pathlib.Path(".env").write_text("WANDB_API_KEY=abc\\n")
pathlib.Path("huge.bin").write_bytes(b"x" * 3_000_000)
"""
CHECKPOINTS = """\
import os, pathlib, time
os.makedirs("ckpt", exist_ok=True)
for step in range(1000):
    tmp = pathlib.Path(f"ckpt/.step-{step}.part")
    tmp.write_bytes(bytes([step % 256]) * (50_000 + step))
    tmp.rename(f"ckpt/step-{step}.bin")
    print("saved step", step, flush=True)
    time.sleep(0.5)
"""


HELPER = "X = 1\n"


def _checkpoint(name: str) -> bytes:
    step = int(name.removeprefix("ckpt/step-").removesuffix(".bin"))
    return bytes([step % 256]) * (50_000 + step)


@pytest.fixture
def outputs_project(project: Path) -> Path:
    (project / "outputs.py").write_text(WRITE_OUTPUTS)
    (project / "quiet.py").write_text(NO_OUTPUTS)
    (project / "working.py").write_text(WRITE_IN_WORKING_COPY)
    (project / "checkpoints.py").write_text(CHECKPOINTS)
    (project / "helper.py").write_text(HELPER)
    (project / "data").mkdir()
    (project / "data" / "table.csv").write_text("a,b\n1,2\n")
    settle(project)
    return project


async def _check_working_copy_outputs(jp_fetch: Any, job: JobRecord) -> None:
    """Exactly what the job created or changed, by relative path and sha256; no secret; the
    file over the cap named with the reason."""
    assert job.status == JobStatus.succeeded, job.message
    assert job.results is not None
    listed = {a.name: a.sha256 for a in job.results.artifacts}
    table = b"a,b\n1,2\n3,4\n"
    assert listed == {
        "data/table.csv": hashlib.sha256(table).hexdigest(),
        "metrics.json": hashlib.sha256(METRICS.encode()).hexdigest(),
        "models/a.bin": hashlib.sha256(MODEL).hexdigest(),
    }
    assert await _download(jp_fetch, job.id, "models/a.bin") == MODEL
    assert await _download(jp_fetch, job.id, "data/table.csv") == table
    left_out = {item.name: item.error for item in job.results.left_out_outputs}
    assert left_out == {
        "huge.bin": "3.0 MB over outputs.max_file_mb (2 MB)",
        ".env": "is a secret by its name (.env*)",
    }
    assert job.results.outputs_note is not None
    assert "left out: huge.bin 3.0 MB over outputs.max_file_mb (2 MB)" in job.results.outputs_note


async def _cancel_mid_run_keeps_checkpoints(
    jp_fetch: Any, jp_ws_fetch: Any, store_outputs: Any, **fields: Any
) -> None:
    """A job writing checkpoints, cancelled once its outputs were synced while it ran: what it
    wrote before the cancel is listed and downloads intact."""
    record = await submit(jp_fetch, call_path="proj/checkpoints.py", **fields)
    deadline = time.monotonic() + 120
    while True:
        index = store_outputs(record.id) / ".j2c-outputs.json"
        if index.exists() and len(json.loads(index.read_text())["files"]) >= 2:
            break
        assert time.monotonic() < deadline, "no outputs synced while the job ran"
        await asyncio.sleep(0.2)
    await jp_fetch("j2c", "api", "jobs", record.id, "cancel", method="POST", body="")
    await follow(jp_ws_fetch, record.id)
    job = JobRecord.model_validate_json((await jp_fetch("j2c", "api", "jobs", record.id)).body)
    assert job.status == JobStatus.cancelled, job.message
    assert job.results is not None
    names = [a.name for a in job.results.artifacts]
    assert len(names) >= 2 and all(name.startswith("ckpt/step-") for name in names), names
    for artifact in job.results.artifacts:
        data = await _download(jp_fetch, job.id, artifact.name)
        assert data == _checkpoint(artifact.name)
        assert artifact.sha256 == hashlib.sha256(data).hexdigest()


async def _run(jp_fetch: Any, jp_ws_fetch: Any, **fields: Any) -> JobRecord:
    record = await submit(jp_fetch, **fields)
    await follow(jp_ws_fetch, record.id)
    return JobRecord.model_validate_json((await jp_fetch("j2c", "api", "jobs", record.id)).body)


async def _download(jp_fetch: Any, job_id: str, name: str) -> bytes:
    response = await jp_fetch("j2c", "api", "jobs", job_id, "artifacts", *name.split("/"))
    body: bytes = response.body
    return body


async def _check_two_outputs(jp_fetch: Any, job: JobRecord) -> None:
    assert job.status == JobStatus.succeeded, job.message
    assert job.results is not None
    listed = {a.name: a for a in job.results.artifacts}
    assert sorted(listed) == ["metrics.json", "model/weights.bin"]
    assert listed["model/weights.bin"].size == len(WEIGHTS)
    assert listed["model/weights.bin"].sha256 == hashlib.sha256(WEIGHTS).hexdigest()
    assert job.results.output_uri is not None
    assert job.results.output_uri.endswith(f"{job.id}/outputs")
    assert job.results.outputs_note is None
    assert await _download(jp_fetch, job.id, "metrics.json") == METRICS.encode()
    assert await _download(jp_fetch, job.id, "model/weights.bin") == WEIGHTS


async def _check_failed_after_one(jp_fetch: Any, job: JobRecord) -> None:
    assert job.status == JobStatus.failed
    assert job.exit_code == 3
    assert job.results is not None
    assert [a.name for a in job.results.artifacts] == ["metrics.json"]
    assert await _download(jp_fetch, job.id, "metrics.json") == METRICS.encode()


# ---------------------------------------------------------------------- Slurm (real)


@pytest.fixture
def jp_server_config(request: pytest.FixtureRequest, jp_server_config: dict[str, Any]) -> Any:
    """Settings for the backend the test is marked with (its fixtures are looked up lazily so
    a Kubernetes test never starts Slurm)."""
    marker = request.node.get_closest_marker("backend")
    name = marker.args[0] if marker else "local"
    overrides: dict[str, Any]
    if name == "slurm":
        cluster: SlurmCluster = request.getfixturevalue("slurm_cluster")
        overrides = {
            "storage": {"shared": True},
            "scheduler": {
                "slurm": {
                    "url": cluster.url,
                    "user": cluster.user,
                    "token": cluster.token,
                    "job_dir": str(cluster.job_dir),
                    # The node is this machine: j2c-unpack from this venv, this checkout's code.
                    "env": {
                        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
                        "PYTHONPATH": str(REPO),
                    },
                }
            },
        }
    elif name == "kubernetes":
        fake: FakeKube = request.getfixturevalue("fake_kube")
        bucket: S3Target = request.getfixturevalue("s3_bucket")
        tmp: Path = request.getfixturevalue("tmp_path")
        overrides = {
            "default_image": "registry.example/ml/pytorch:2.4",
            "storage": {
                "url": bucket.url,
                "endpoint_url": bucket.endpoint,
                "region": "us-east-1",
                "addressing_style": "path",
            },
            "scheduler": {
                "kubernetes": {
                    "kubeconfig": str(write_kubeconfig(tmp / "kubeconfig", fake)),
                    "poll_interval_s": 0.05,
                }
            },
        }
    else:
        overrides = {"scheduler": {"local": {"pass_env": ["PYTHONPATH"]}}}
    overrides["outputs"] = {"max_file_mb": 2, "sync_every_minutes": 0.02}
    return {**jp_server_config, "J2CApp": {"settings_overrides": overrides}}


@pytest.mark.slurm
@pytest.mark.backend("slurm")
async def test_slurm_job_lists_and_serves_its_two_outputs(
    jp_fetch: Any, jp_ws_fetch: Any, outputs_project: Path
) -> None:
    job = await _run(jp_fetch, jp_ws_fetch, call_path="proj/outputs.py", scheduler="slurm")
    await _check_two_outputs(jp_fetch, job)


@pytest.mark.slurm
@pytest.mark.backend("slurm")
async def test_slurm_job_that_fails_after_one_output_still_lists_it(
    jp_fetch: Any, jp_ws_fetch: Any, outputs_project: Path
) -> None:
    job = await _run(
        jp_fetch, jp_ws_fetch, call_path="proj/outputs.py", scheduler="slurm", args=["--fail"]
    )
    await _check_failed_after_one(jp_fetch, job)


@pytest.mark.slurm
@pytest.mark.backend("slurm")
async def test_slurm_job_returns_what_it_wrote_in_its_working_copy(
    jp_fetch: Any, jp_ws_fetch: Any, outputs_project: Path
) -> None:
    job = await _run(jp_fetch, jp_ws_fetch, call_path="proj/working.py", scheduler="slurm")
    await _check_working_copy_outputs(jp_fetch, job)


@pytest.mark.slurm
@pytest.mark.backend("slurm")
async def test_slurm_job_cancelled_mid_run_keeps_its_checkpoints(
    jp_fetch: Any, jp_ws_fetch: Any, outputs_project: Path, j2c_data_dir: Path
) -> None:
    def store_outputs(job_id: str) -> Path:
        return j2c_data_dir / "store" / "jobs" / job_id / "outputs"

    await _cancel_mid_run_keeps_checkpoints(jp_fetch, jp_ws_fetch, store_outputs, scheduler="slurm")


# ---------------------------------------------------------------------- Kubernetes (fake API)


@contextlib.asynccontextmanager
async def kubelet(fake: FakeKube) -> AsyncIterator[None]:
    """Run each new pod's container command here, as the node would, then finish the pod with
    its exit code. The pod's env is the spec's; the credentials are the node's (the test's). Its
    output is the pod's log (where the server finds the outputs index's sha256)."""
    started: set[str] = set()

    async def loop() -> None:
        while True:
            for (_namespace, name), job in list(fake.jobs.items()):
                if name in started or job["spec"].get("suspend"):
                    continue
                started.add(name)
                container = job["spec"]["template"]["spec"]["containers"][0]
                argv = list(container.get("command") or []) + list(container.get("args") or [])
                assert argv[0] == "j2c-unpack"
                env = {item["name"]: item["value"] for item in container.get("env") or []}
                env = {**os.environ, **env, "PYTHONPATH": str(REPO)}
                fake.start(name)
                process = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "j2c_server.unpack",
                    *argv[1:],
                    env=env,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.STDOUT,
                )
                assert process.stdout is not None
                async for line in process.stdout:  # the pod's log, as the API serves it
                    fake.log(name, line.decode().rstrip("\n"))
                fake.finish(name, await process.wait())
            await asyncio.sleep(0.05)

    task = asyncio.create_task(loop())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.mark.backend("kubernetes")
async def test_kubernetes_job_lists_and_serves_its_two_outputs_from_s3(
    jp_fetch: Any, jp_ws_fetch: Any, outputs_project: Path, fake_kube: FakeKube
) -> None:
    async with kubelet(fake_kube):
        job = await _run(
            jp_fetch,
            jp_ws_fetch,
            call_path="proj/outputs.py",
            scheduler="kubernetes",
            args=["--notebook"],
        )
    assert job.results is not None
    assert job.results.output_uri is not None and job.results.output_uri.startswith("s3://")
    assert job.results.executed_notebook == f"{job.results.output_uri}/report.ipynb"
    names = [a.name for a in job.results.artifacts]
    assert names == ["metrics.json", "model/weights.bin", "report.ipynb"]
    # "Open executed notebook": copied from the bucket into the project, then opened there.
    copied = await jp_fetch(
        "j2c", "api", "jobs", job.id, "artifacts", "report.ipynb", "copy", method="POST", body=""
    )
    assert json.loads(copied.body)["path"] == f"proj/j2c-outputs/{job.id}/report.ipynb"
    assert (outputs_project / "j2c-outputs" / job.id / "report.ipynb").read_text() == NOTEBOOK
    job.results.artifacts = [a for a in job.results.artifacts if a.name != "report.ipynb"]
    await _check_two_outputs(jp_fetch, job)


@pytest.mark.backend("kubernetes")
async def test_kubernetes_job_that_fails_after_one_output_still_lists_it(
    jp_fetch: Any, jp_ws_fetch: Any, outputs_project: Path, fake_kube: FakeKube
) -> None:
    async with kubelet(fake_kube):
        job = await _run(
            jp_fetch,
            jp_ws_fetch,
            call_path="proj/outputs.py",
            scheduler="kubernetes",
            args=["--fail"],
        )
    await _check_failed_after_one(jp_fetch, job)


@pytest.mark.backend("kubernetes")
async def test_kubernetes_job_without_outputs_says_so(
    jp_fetch: Any, jp_ws_fetch: Any, outputs_project: Path, fake_kube: FakeKube
) -> None:
    async with kubelet(fake_kube):
        job = await _run(jp_fetch, jp_ws_fetch, call_path="proj/quiet.py", scheduler="kubernetes")
    assert job.status == JobStatus.succeeded
    assert job.results is not None
    assert job.results.artifacts == []
    assert job.results.outputs_note == "no outputs"


@pytest.mark.backend("kubernetes")
async def test_kubernetes_job_returns_what_it_wrote_in_its_working_copy(
    jp_fetch: Any, jp_ws_fetch: Any, outputs_project: Path, fake_kube: FakeKube
) -> None:
    async with kubelet(fake_kube):
        job = await _run(jp_fetch, jp_ws_fetch, call_path="proj/working.py", scheduler="kubernetes")
    assert job.results is not None
    assert job.results.output_uri is not None and job.results.output_uri.startswith("s3://")
    await _check_working_copy_outputs(jp_fetch, job)


# ---------------------------------------------------------------------- local


@pytest.mark.backend("local")
async def test_local_job_artifacts_carry_the_digests_of_the_index(
    jp_fetch: Any, jp_ws_fetch: Any, outputs_project: Path, j2c_data_dir: Path
) -> None:
    job = await _run(jp_fetch, jp_ws_fetch, call_path="proj/outputs.py")
    await _check_two_outputs(jp_fetch, job)
    index = j2c_data_dir / "store" / "jobs" / job.id / "outputs" / ".j2c-outputs.json"
    assert json.loads(index.read_text())["failed"] == []


@pytest.mark.backend("local")
async def test_local_job_returns_what_it_wrote_in_its_working_copy(
    jp_fetch: Any, jp_ws_fetch: Any, outputs_project: Path
) -> None:
    job = await _run(jp_fetch, jp_ws_fetch, call_path="proj/working.py")
    await _check_working_copy_outputs(jp_fetch, job)


@pytest.mark.backend("local")
async def test_local_job_cancelled_mid_run_keeps_its_checkpoints(
    jp_fetch: Any, jp_ws_fetch: Any, outputs_project: Path, j2c_data_dir: Path
) -> None:
    def store_outputs(job_id: str) -> Path:
        return j2c_data_dir / "store" / "jobs" / job_id / "outputs"

    await _cancel_mid_run_keeps_checkpoints(jp_fetch, jp_ws_fetch, store_outputs)
