""" "Copy all": ``POST /jobs/{id}/copy-artifacts`` through the real server, on a job that ran for
real (local scheduler, real ``j2c-unpack``, the embedded ``file://`` store): every artifact
lands in ``<project>/j2c-outputs/<id>/`` with its relative path, and a file that cannot be
copied is named with why while the others still go. Anonymous requests: ``tests/test_auth.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from j2c_server.pack.models import PackPlan
from j2c_server.wire.api import ArtifactsCopy, JobRecord, JobStatus
from tests.api.test_artifacts import CURVE, METRICS, NOTEBOOK, WRITE_OUTPUTS
from tests.support.jobs import follow, job_body, settle, submit


@pytest.fixture
def outputs_project(project: Path) -> Path:
    (project / "outputs.py").write_text(WRITE_OUTPUTS)
    settle(project)
    return project


async def _finished(jp_fetch: Any, jp_ws_fetch: Any) -> JobRecord:
    record = await submit(jp_fetch, call_path="proj/outputs.py")
    await follow(jp_ws_fetch, record.id)
    done = JobRecord.model_validate_json((await jp_fetch("j2c", "api", "jobs", record.id)).body)
    assert done.status == JobStatus.succeeded, done.message
    return done


async def _copy_all(jp_fetch: Any, job_id: str) -> ArtifactsCopy:
    response = await jp_fetch(
        "j2c", "api", "jobs", job_id, "copy-artifacts", method="POST", body=""
    )
    return ArtifactsCopy.model_validate_json(response.body)


async def test_copy_all_puts_every_artifact_in_the_project_with_its_relative_path(
    jp_fetch: Any, jp_ws_fetch: Any, outputs_project: Path, jp_root_dir: Path
) -> None:
    job = await _finished(jp_fetch, jp_ws_fetch)
    done = await _copy_all(jp_fetch, job.id)
    folder = f"proj/j2c-outputs/{job.id}"
    assert done.folder == folder
    assert sorted(done.copied) == [
        f"{folder}/metrics.json",
        f"{folder}/plots/loss curve.csv",
        f"{folder}/report.ipynb",
    ]
    assert done.failed == []
    assert (jp_root_dir / folder / "metrics.json").read_text() == METRICS
    assert (jp_root_dir / folder / "plots" / "loss curve.csv").read_text() == CURVE
    assert (jp_root_dir / folder / "report.ipynb").read_text() == NOTEBOOK
    assert (outputs_project / "j2c-outputs" / ".gitignore").read_text() == "*\n"
    # Again: the same bytes already there are the copies.
    assert await _copy_all(jp_fetch, job.id) == done


async def test_copy_all_names_each_file_it_could_not_copy_and_copies_the_rest(
    jp_fetch: Any, jp_ws_fetch: Any, outputs_project: Path, jp_root_dir: Path
) -> None:
    job = await _finished(jp_fetch, jp_ws_fetch)
    mine = outputs_project / "j2c-outputs" / job.id / "metrics.json"
    mine.parent.mkdir(parents=True)
    mine.write_text("my edits")
    done = await _copy_all(jp_fetch, job.id)
    assert [(item.name, item.error) for item in done.failed] == [
        (
            "metrics.json",
            f"name: 'proj/j2c-outputs/{job.id}/metrics.json' exists with other content; "
            "not overwritten",
        )
    ]
    assert len(done.copied) == 2
    assert mine.read_text() == "my edits"
    assert (mine.parent / "report.ipynb").read_text() == NOTEBOOK


async def test_copy_all_of_a_running_job_is_refused(
    jp_fetch: Any, jp_ws_fetch: Any, outputs_project: Path
) -> None:
    record = await submit(jp_fetch, call_path="proj/outputs.py", args=["30"])
    try:
        with pytest.raises(HTTPClientError) as refused:
            await _copy_all(jp_fetch, record.id)
        assert refused.value.code == 409
        assert refused.value.response is not None
        assert "has not finished" in json.loads(refused.value.response.body)["message"]
    finally:
        await jp_fetch("j2c", "api", "jobs", record.id, "cancel", method="POST", body="")
        await follow(jp_ws_fetch, record.id)


async def test_copy_all_of_an_unknown_job_is_not_found(jp_fetch: Any) -> None:
    with pytest.raises(HTTPClientError) as refused:
        await _copy_all(jp_fetch, "no-such-job")
    assert refused.value.code == 404


async def test_the_copies_stay_out_of_the_next_send(
    jp_fetch: Any, jp_ws_fetch: Any, outputs_project: Path
) -> None:
    job = await _finished(jp_fetch, jp_ws_fetch)
    await _copy_all(jp_fetch, job.id)
    response = await jp_fetch(
        "j2c",
        "api",
        "preflight",
        method="POST",
        body=json.dumps(job_body(call_path="proj/outputs.py")),
    )
    plan = PackPlan.model_validate_json(response.body)
    left_out = {path for group in plan.excluded for path in group.paths}
    assert f"j2c-outputs/{job.id}/" in left_out, plan.excluded
    again = await submit(jp_fetch, call_path="proj/outputs.py")
    await follow(jp_ws_fetch, again.id)
    sent = JobRecord.model_validate_json((await jp_fetch("j2c", "api", "jobs", again.id)).body)
    assert sent.status == JobStatus.succeeded, sent.message
    assert sent.results is not None
    # The copies did not ship: the job's working copy had none, so none came back as written.
    assert not [a.name for a in sent.results.artifacts if a.name.startswith("j2c-outputs")]
