"""Status lines sit where they belong in a job's event stream: ``running`` before the first line
of output, recorded in the same write (the scheduler's status poll may lag a second behind)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from j2c_server.wire.api import EventKind, JobStatus
from tests.support.jobs import follow, submit


async def test_running_is_numbered_before_the_first_line_of_output(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path
) -> None:
    record = await submit(jp_fetch, args=["--lines", "5"])
    events = await follow(jp_ws_fetch, record.id)
    first_log = next(e.seq for e in events if e.kind == EventKind.log)
    running = [e.seq for e in events if e.status == JobStatus.running]
    assert running and running[0] < first_log
    # Once output started, no status but the end lands between its lines.
    last_log = max(e.seq for e in events if e.kind == EventKind.log)
    between = [
        e.status for e in events if e.kind == EventKind.status and first_log < e.seq < last_log
    ]
    assert set(between) <= {JobStatus.running}
