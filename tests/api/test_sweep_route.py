"""``GET /j2c/api/jobs/{id}/sweep`` through the real server: what a job that is no sweep's
parent, or no job at all, answers (the one error mapping: 404 with the reason)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from j2c_server.sweeps import view as sweep_view
from j2c_server.wire.sweep_view import SweepView
from tests.support.jobs import follow, settle, submit


async def test_the_sweep_of_an_unknown_job_is_not_found(jp_fetch: Any) -> None:
    with pytest.raises(HTTPClientError) as missing:
        await jp_fetch("j2c", "api", "jobs", "no-such-job", "sweep")
    assert missing.value.code == 404


async def test_a_plain_job_has_no_sweep_view(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path
) -> None:
    record = await submit(jp_fetch, args=["--lines", "1"])
    await follow(jp_ws_fetch, record.id)
    with pytest.raises(HTTPClientError) as refused:
        await jp_fetch("j2c", "api", "jobs", record.id, "sweep")
    assert refused.value.code == 404
    body = json.loads(refused.value.response.body)
    assert f"job {record.id} is not a sweep" in body["message"]


METRICS_PY = """\
import json, os, sys
lr = float(sys.argv[sys.argv.index("--lr") + 1])
history = [{"epoch": e, "loss": lr * 10 / e} for e in (1, 2, 3)]
with open(os.path.join(os.environ["J2C_OUTPUT_DIR"], "metrics.json"), "w") as out:
    json.dump({"history": history}, out)
print("lr", lr, flush=True)
"""


async def test_the_route_answers_each_variants_job_and_metrics_json(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Real jobs with real outputs; which jobs form the sweep is the one seam set here (the
    # parent/children fields of the record come with the sweep itself, #30 sections 1-2).
    (project / "metrics.py").write_text(METRICS_PY)
    settle(project)
    lrs = ["0.1", "0.01"]
    jobs = []
    for lr in lrs:
        record = await submit(jp_fetch, call_path="proj/metrics.py", args=["--lr", lr])
        await follow(jp_ws_fetch, record.id)
        jobs.append(record)
    ids = [job.id for job in jobs]
    parent_id = jobs[0].id
    monkeypatch.setattr(
        sweep_view, "sweep_children", lambda r: (["lr"], ids) if r.id == parent_id else None
    )
    body = json.loads((await jp_fetch("j2c", "api", "jobs", parent_id, "sweep")).body)
    view = SweepView.model_validate(body)
    assert view.summary == "2/2 succeeded"
    assert [v.job.id for v in view.variants] == [job.id for job in jobs]
    assert [v.index for v in view.variants] == [0, 1]
    first, second = view.variants
    assert first.metrics_source == "metrics.json"
    assert first.metrics == {"loss": pytest.approx(1 / 3)}
    assert [p.step for p in first.history["loss"]] == [1, 2, 3]
    assert second.metrics == {"loss": pytest.approx(0.1 / 3)}
    assert first.job.exit_code == 0
