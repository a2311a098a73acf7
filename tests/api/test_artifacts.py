"""A finished job's artifacts through the real server: downloaded from
``/jobs/{id}/artifacts/{name}`` and copied into the project by ``.../copy``.

The job runs for real (packed, stored in the embedded ``file://`` store, run by the local
scheduler through ``j2c-unpack``) and writes its files into ``$J2C_OUTPUT_DIR``; the ``s3://``
case reads a real (moto) bucket. Anonymous requests are refused by ``tests/test_auth.py``, which
covers every route.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError, HTTPResponse

from j2c_server.config import StorageSettings
from j2c_server.core.errors import Forbidden, IntegrityError, NotFound
from j2c_server.jobs.artifacts import open_artifact
from j2c_server.wire.api import Artifact, JobRecord, JobRequest, JobResults, JobStatus
from tests.support.jobs import follow, settle, submit
from tests.support.s3 import S3Target

METRICS = '{"accuracy": 0.93}\n'
NOTEBOOK = '{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}\n'
CURVE = "epoch,loss\n1,0.5\n"

WRITE_OUTPUTS = f"""\
import os, sys, time
out = os.environ["J2C_OUTPUT_DIR"]
os.makedirs(os.path.join(out, "plots"))
with open(os.path.join(out, "metrics.json"), "w") as f:
    f.write({METRICS!r})
with open(os.path.join(out, "report.ipynb"), "w") as f:
    f.write({NOTEBOOK!r})
with open(os.path.join(out, "plots", "loss curve.csv"), "w") as f:
    f.write({CURVE!r})
# A link out of the outputs folder: never uploaded, listed or served.
os.symlink("/etc/passwd", os.path.join(out, "leak.txt"))
time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 0)
"""


@pytest.fixture
def outputs_project(project: Path) -> Path:
    (project / "outputs.py").write_text(WRITE_OUTPUTS)
    settle(project)
    return project


async def _finished_job(jp_fetch: Any, jp_ws_fetch: Any) -> JobRecord:
    record = await submit(jp_fetch, call_path="proj/outputs.py")
    await follow(jp_ws_fetch, record.id)
    done = JobRecord.model_validate_json((await jp_fetch("j2c", "api", "jobs", record.id)).body)
    assert done.status == JobStatus.succeeded
    return done


async def _raw(
    http_server_client: Any, jp_auth_header: dict[str, str], jp_base_url: str, path: str
) -> HTTPResponse:
    """GET an already-encoded path (jp_fetch would encode ``%`` again)."""
    response: HTTPResponse = await http_server_client.fetch(
        jp_base_url.rstrip("/") + "/j2c/api/" + path,
        headers=dict(jp_auth_header),
        raise_error=False,
    )
    return response


def _error(response: HTTPResponse) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(response.body)
    return body


async def test_artifact_downloads_with_its_bytes_as_an_attachment(
    jp_fetch: Any, jp_ws_fetch: Any, outputs_project: Path
) -> None:
    job = await _finished_job(jp_fetch, jp_ws_fetch)
    response = await jp_fetch("j2c", "api", "jobs", job.id, "artifacts", "metrics.json")
    assert response.body == METRICS.encode()
    assert response.headers["Content-Type"] == "application/json"
    assert response.headers["Content-Disposition"].startswith('attachment; filename="metrics.json"')


async def test_artifact_in_a_subfolder_downloads_by_its_relative_name(
    jp_fetch: Any, jp_ws_fetch: Any, outputs_project: Path
) -> None:
    job = await _finished_job(jp_fetch, jp_ws_fetch)
    response = await jp_fetch("j2c", "api", "jobs", job.id, "artifacts", "plots/loss curve.csv")
    assert response.body == CURVE.encode()
    assert "filename*=UTF-8''loss%20curve.csv" in response.headers["Content-Disposition"]


async def test_unknown_artifact_name_is_not_found(
    jp_fetch: Any, jp_ws_fetch: Any, outputs_project: Path
) -> None:
    job = await _finished_job(jp_fetch, jp_ws_fetch)
    with pytest.raises(HTTPClientError) as refused:
        await jp_fetch("j2c", "api", "jobs", job.id, "artifacts", "outputs.py")
    assert refused.value.code == 404
    assert refused.value.response is not None
    assert _error(refused.value.response)["field"] == "name"


@pytest.mark.parametrize(
    "path",
    ["../../../../etc/passwd", "..%2F..%2Fouts.py", "%2Fetc%2Fpasswd", "plots%5C..%5Cmetrics.json"],
    ids=["dot-dot", "encoded-dot-dot", "absolute", "backslashes"],
)
async def test_traversal_names_are_refused(
    path: str,
    jp_fetch: Any,
    jp_ws_fetch: Any,
    outputs_project: Path,
    http_server_client: Any,
    jp_auth_header: dict[str, str],
    jp_base_url: str,
) -> None:
    job = await _finished_job(jp_fetch, jp_ws_fetch)
    response = await _raw(
        http_server_client, jp_auth_header, jp_base_url, f"jobs/{job.id}/artifacts/{path}"
    )
    assert response.code == 400
    assert _error(response)["field"] == "name"


async def test_a_symlink_in_the_outputs_is_neither_listed_nor_served(
    jp_fetch: Any, jp_ws_fetch: Any, outputs_project: Path
) -> None:
    job = await _finished_job(jp_fetch, jp_ws_fetch)
    assert job.results is not None
    assert "leak.txt" not in [artifact.name for artifact in job.results.artifacts]
    with pytest.raises(HTTPClientError) as refused:
        await jp_fetch("j2c", "api", "jobs", job.id, "artifacts", "leak.txt")
    assert refused.value.code == 404


async def test_recorded_artifact_linking_outside_the_outputs_is_refused(tmp_path: Path) -> None:
    # A scheduler's own listing of a local outputs folder may name a link: it is never read.
    (tmp_path / "outputs").mkdir()
    (tmp_path / "outputs" / "leak.txt").symlink_to("/etc/passwd")
    record = _record("file", (tmp_path / "outputs").as_uri(), [Artifact(name="leak.txt")])
    with pytest.raises(Forbidden, match="leads outside the job's outputs"):
        async with open_artifact(record, "leak.txt", StorageSettings()):
            pass


async def test_a_tampered_output_is_neither_downloaded_nor_copied(
    jp_fetch: Any, jp_ws_fetch: Any, outputs_project: Path, j2c_data_dir: Path
) -> None:
    job = await _finished_job(jp_fetch, jp_ws_fetch)
    stored = j2c_data_dir / "store" / "jobs" / job.id / "outputs" / "metrics.json"
    stored.write_text('{"accuracy": 0.99}\n')  # someone else with write access to the store
    with pytest.raises(HTTPClientError) as refused:
        await jp_fetch("j2c", "api", "jobs", job.id, "artifacts", "metrics.json")
    assert refused.value.code == 502
    assert refused.value.response is not None
    error = _error(refused.value.response)
    assert error["error"] == "integrity"
    assert "is not the file the job wrote" in error["message"]
    copy = ("j2c", "api", "jobs", job.id, "artifacts", "metrics.json", "copy")
    with pytest.raises(HTTPClientError) as not_copied:
        await jp_fetch(*copy, method="POST", body="")
    assert not_copied.value.code == 502
    assert not (outputs_project / "j2c-outputs" / job.id / "metrics.json").exists()
    # The untouched ones still come.
    response = await jp_fetch("j2c", "api", "jobs", job.id, "artifacts", "report.ipynb")
    assert response.body == NOTEBOOK.encode()


async def test_artifacts_of_a_running_job_are_a_conflict(
    jp_fetch: Any, jp_ws_fetch: Any, outputs_project: Path
) -> None:
    record = await submit(jp_fetch, call_path="proj/outputs.py", args=["30"])
    try:
        with pytest.raises(HTTPClientError) as refused:
            await jp_fetch("j2c", "api", "jobs", record.id, "artifacts", "metrics.json")
        assert refused.value.code == 409
    finally:
        await jp_fetch("j2c", "api", "jobs", record.id, "cancel", method="POST", body="")
        await follow(jp_ws_fetch, record.id)


async def test_copy_puts_the_notebook_in_the_project_and_answers_its_path(
    jp_fetch: Any, jp_ws_fetch: Any, outputs_project: Path, jp_root_dir: Path
) -> None:
    job = await _finished_job(jp_fetch, jp_ws_fetch)
    assert job.results is not None
    assert job.results.executed_notebook is not None
    assert job.results.executed_notebook.endswith("/report.ipynb")
    response = await jp_fetch(
        "j2c", "api", "jobs", job.id, "artifacts", "report.ipynb", "copy", method="POST", body=""
    )
    path = json.loads(response.body)["path"]
    assert path == f"proj/j2c-outputs/{job.id}/report.ipynb"
    assert (jp_root_dir / path).read_text() == NOTEBOOK


async def test_copied_outputs_are_ignored_by_git_and_the_packer(
    jp_fetch: Any, jp_ws_fetch: Any, outputs_project: Path
) -> None:
    job = await _finished_job(jp_fetch, jp_ws_fetch)
    await jp_fetch(
        "j2c", "api", "jobs", job.id, "artifacts", "metrics.json", "copy", method="POST", body=""
    )
    assert (outputs_project / "j2c-outputs" / ".gitignore").read_text() == "*\n"


async def test_copying_twice_answers_the_same_path(
    jp_fetch: Any, jp_ws_fetch: Any, outputs_project: Path
) -> None:
    job = await _finished_job(jp_fetch, jp_ws_fetch)
    parts = ("j2c", "api", "jobs", job.id, "artifacts", "plots/loss curve.csv", "copy")
    first = json.loads((await jp_fetch(*parts, method="POST", body="")).body)
    second = json.loads((await jp_fetch(*parts, method="POST", body="")).body)
    assert first == second == {"path": f"proj/j2c-outputs/{job.id}/plots/loss curve.csv"}


async def test_copy_never_overwrites_another_file(
    jp_fetch: Any, jp_ws_fetch: Any, outputs_project: Path
) -> None:
    job = await _finished_job(jp_fetch, jp_ws_fetch)
    mine = outputs_project / "j2c-outputs" / job.id / "metrics.json"
    mine.parent.mkdir(parents=True)
    mine.write_text("my edits")
    with pytest.raises(HTTPClientError) as refused:
        await jp_fetch(
            "j2c",
            "api",
            "jobs",
            job.id,
            "artifacts",
            "metrics.json",
            "copy",
            method="POST",
            body="",
        )
    assert refused.value.code == 409
    assert mine.read_text() == "my edits"


async def test_copy_through_a_symlink_out_of_the_root_is_forbidden(
    jp_fetch: Any,
    jp_ws_fetch: Any,
    outputs_project: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    job = await _finished_job(jp_fetch, jp_ws_fetch)
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    (outputs_project / "j2c-outputs").symlink_to(elsewhere)
    with pytest.raises(HTTPClientError) as refused:
        await jp_fetch(
            "j2c",
            "api",
            "jobs",
            job.id,
            "artifacts",
            "metrics.json",
            "copy",
            method="POST",
            body="",
        )
    assert refused.value.code == 403
    assert list(elsewhere.iterdir()) == []


async def test_copy_of_an_unknown_artifact_is_not_found(
    jp_fetch: Any, jp_ws_fetch: Any, outputs_project: Path
) -> None:
    job = await _finished_job(jp_fetch, jp_ws_fetch)
    with pytest.raises(HTTPClientError) as refused:
        await jp_fetch(
            "j2c", "api", "jobs", job.id, "artifacts", "nope.ipynb", "copy", method="POST", body=""
        )
    assert refused.value.code == 404
    assert not (outputs_project / "j2c-outputs" / job.id / "nope.ipynb").exists()


def _record(scheduler: str, output_uri: str, artifacts: list[Artifact]) -> JobRecord:
    now = time.time()
    return JobRecord(
        id="job-1",
        name="train.py",
        key="k",
        status=JobStatus.succeeded,
        request=JobRequest(code_path="/p", call_path="train.py"),
        scheduler=scheduler,
        created_at=now,
        updated_at=now,
        results=JobResults(artifacts=artifacts, output_uri=output_uri),
    )


def _s3_record(bucket: S3Target, names: list[str], sha256: str | None = None) -> JobRecord:
    artifacts = [Artifact(name=name, sha256=sha256) for name in names]
    return _record("slurm", bucket.url + "/jobs/job-1/outputs", artifacts)


async def test_artifact_in_an_s3_store_is_read_through_the_store(s3_bucket: S3Target) -> None:
    s3_bucket.client().put_object(
        Bucket=s3_bucket.bucket,
        Key=s3_bucket.key("jobs/job-1/outputs/metrics.json"),
        Body=METRICS.encode(),
    )
    record = _s3_record(s3_bucket, ["metrics.json"])
    async with open_artifact(record, "metrics.json", s3_bucket.settings) as artifact:
        read = b"".join([chunk async for chunk in artifact.chunks()])
    assert read == METRICS.encode()
    assert not artifact.path.exists()  # the temporary copy is gone


async def test_recorded_artifact_missing_from_the_s3_store_is_not_found(
    s3_bucket: S3Target,
) -> None:
    record = _s3_record(s3_bucket, ["gone.bin"])
    with pytest.raises(NotFound):
        async with open_artifact(record, "gone.bin", s3_bucket.settings):
            pass


async def test_an_s3_artifact_replaced_in_the_bucket_is_refused(s3_bucket: S3Target) -> None:
    s3_bucket.client().put_object(
        Bucket=s3_bucket.bucket,
        Key=s3_bucket.key("jobs/job-1/outputs/model.pt"),
        Body=b"someone else's weights",
    )
    record = _s3_record(s3_bucket, ["model.pt"], hashlib.sha256(b"the job's weights").hexdigest())
    with pytest.raises(IntegrityError, match="is not the file the job wrote"):
        async with open_artifact(record, "model.pt", s3_bucket.settings):
            pass
