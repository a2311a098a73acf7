"""Stage caching through the real server: what a new run reuses, what it re-runs, and why."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from j2c_server.jobs.stage_text import describe
from j2c_server.wire.api import EventKind, JobRecord, JobStatus
from tests.support.jobs import final_status, follow, settle, stage_events, submit


@pytest.fixture
def venv(jp_root_dir: Path) -> Path:
    """A real ``--system-site-packages`` venv under the server's root (no pip: fast)."""
    path = jp_root_dir / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(path)],
        check=True,
    )
    settle(path)
    return path


async def _run(jp_fetch: Any, jp_ws_fetch: Any, **fields: Any) -> tuple[str, dict[str, Any]]:
    record = await submit(jp_fetch, **fields)
    events = await follow(jp_ws_fetch, record.id)
    assert final_status(events) == JobStatus.succeeded
    return record.id, {
        stage: (event.state, event.text) for stage, event in stage_events(events).items()
    }


async def test_new_run_of_the_same_request_reuses_pack_upload_and_configure(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path
) -> None:
    first, _ = await _run(jp_fetch, jp_ws_fetch, args=["--lines", "1"])
    _, stages = await _run(jp_fetch, jp_ws_fetch, args=["--lines", "1"], new=True)
    assert stages["pack"] == ("reused", f"code layer reused: unchanged since job {first}")
    assert stages["upload"][0] == "reused"
    assert f"since job {first}" in stages["upload"][1]
    assert stages["configure"] == ("reused", f"unchanged since job {first}")
    assert stages["submit"][0] == "finished"


async def test_changed_arg_reruns_configure_and_submit_only(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path
) -> None:
    first, _ = await _run(jp_fetch, jp_ws_fetch, args=["--lines", "1"])
    _, stages = await _run(jp_fetch, jp_ws_fetch, args=["--lines", "2"])
    assert stages["pack"][0] == "reused"
    assert stages["upload"][0] == "reused"
    assert stages["configure"] == (
        "finished",
        f"args changed since job {first}: job spec rebuilt",
    )
    assert stages["submit"][0] == "finished"


async def test_changed_code_repacks_the_code_layer_and_reuses_the_venv(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path, venv: Path
) -> None:
    fields = {"venv_path": "venv", "args": ["--lines", "1"]}
    first, _ = await _run(jp_fetch, jp_ws_fetch, **fields)
    (project / "helpers" / "__init__.py").write_text("VALUE = 2\n")
    settle(project / "helpers", age_s=600)
    _, stages = await _run(jp_fetch, jp_ws_fetch, **fields, new=True)
    state, text = stages["pack"]
    assert state == "finished"
    assert f"venv layer reused: unchanged since job {first}" in text
    assert "code layer packed:" in text
    assert f"changed since job {first}" in text
    assert stages["upload"][0] == "finished"
    assert "already in the store" in stages["upload"][1]
    assert stages["configure"][1] == f"manifest changed since job {first}: job spec rebuilt"


async def test_stage_records_keep_keys_and_outputs(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path
) -> None:
    job_id, _ = await _run(jp_fetch, jp_ws_fetch)
    record = JobRecord.model_validate_json((await jp_fetch("j2c", "api", "jobs", job_id)).body)
    assert list(record.stages) == [
        "scan",
        "pack",
        "upload",
        "configure",
        "submit",
        "watch",
        "results",
    ]
    assert all(
        stage.key and stage.state in ("finished", "reused") for stage in record.stages.values()
    )
    assert record.stages["upload"].output["manifest_uri"] == record.manifest_uri


async def test_every_stage_event_reads_as_its_data_says(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path
) -> None:
    """The words are made from the data alone: a front end can rebuild every stage event's text,
    and the data names the job a reused layer and upload come from."""
    first, _ = await _run(jp_fetch, jp_ws_fetch, args=["--lines", "1"])
    record = await submit(jp_fetch, args=["--lines", "2"])
    events = await follow(jp_ws_fetch, record.id)
    staged = [event for event in events if event.kind == EventKind.stage]
    assert len(staged) == 14  # started and finished/reused, seven stages
    for event in staged:
        assert event.stage is not None and event.state is not None
        assert event.text == describe(event.stage, event.state, event.data)
        assert not event.text.startswith(f"{event.stage.value}:")
    done = stage_events(events)
    (layer,) = done["pack"].data["layers"]
    assert (layer["outcome"], layer["reused_from"]) == ("reused", first)
    assert done["upload"].data["reused_from"] == first
    assert done["configure"].data["changed"] == ["args"]
    assert done["configure"].data["since"] == first
    assert done["submit"].data["scheduler"] == "local"
