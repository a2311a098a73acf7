"""A stage that fails says so: its own ``failed`` stage event with the reason, before the error
and the job's failed status; its record says failed, not running."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from j2c_server.wire.api import EventKind, JobRecord, JobStatus, Stage, StageState
from tests.support.jobs import follow, submit


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    # A file:// store cannot presign URLs: the configure stage fails, every time.
    overrides = {"storage": {"presign_for_jobs": True}}
    return {**jp_server_config, "J2CApp": {"settings_overrides": overrides}}


async def test_the_failing_stage_writes_a_failed_event_and_record(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path
) -> None:
    record = await submit(jp_fetch)
    events = await follow(jp_ws_fetch, record.id)
    failed = [e for e in events if e.kind == EventKind.stage and e.state == StageState.failed]
    assert [e.stage for e in failed] == [Stage.configure]
    assert "presign" in (failed[0].text or "")
    error = next(e for e in events if e.kind == EventKind.error)
    assert failed[0].seq < error.seq
    assert events[-1].status == JobStatus.failed
    done = JobRecord.model_validate(
        json.loads((await jp_fetch("j2c", "api", "jobs", record.id)).body)
    )
    assert done.stages["configure"].state == StageState.failed
    assert done.stages["pack"].state in (StageState.finished, StageState.reused)
