"""Fixtures and helpers for tests that run real jobs through the server: a small project under
the server's root folder, submitting over REST and following the websocket stream."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from j2c_server.wire.api import Event, EventKind, JobRecord, JobStatus
from j2c_server.wire.event_frames import diary_text

if TYPE_CHECKING:
    from j2c_server.jobs.service import JobService

TRAIN_PY = """\
import argparse, os, sys, time

parser = argparse.ArgumentParser()
parser.add_argument("--lines", type=int, default=5)
parser.add_argument("--sleep", type=float, default=0.0)
parser.add_argument("--exit", type=int, default=0)
args = parser.parse_args()
print(f"pid {os.getpid()}", flush=True)
for i in range(args.lines):
    print(f"line {i}", flush=True)
    time.sleep(args.sleep)
out = os.environ.get("J2C_OUTPUT_DIR")
if out:
    with open(os.path.join(out, "result.txt"), "w") as handle:
        handle.write("done")
if args.exit:
    print(f"failing with {args.exit}", file=sys.stderr, flush=True)
sys.exit(args.exit)
"""

STREAM_TIMEOUT_S = 120.0


@pytest.fixture
def project(jp_root_dir: Path) -> Path:
    """``<root>/proj`` with ``train.py`` (prints ``pid N`` then ``line 0..N-1``) and a helper
    module, as a data scientist's folder would look."""
    root = jp_root_dir / "proj"
    (root / "helpers").mkdir(parents=True)
    (root / "train.py").write_text(TRAIN_PY)
    (root / "helpers" / "__init__.py").write_text("VALUE = 1\n")
    settle(root)
    return root


def settle(root: Path, age_s: float = 3600) -> None:
    """Date every file under ``root`` back, as a user's files are: the packer does not trust
    fingerprints of files written in the last seconds (their mtime could still repeat)."""
    when = time.time() - age_s
    for path in [root, *root.rglob("*")]:
        os.utime(path, (when, when), follow_symlinks=False)


def job_body(**fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"code_path": "proj", "call_path": "proj/train.py"}
    body.update(fields)
    return body


async def submit(jp_fetch: Callable[..., Any], **fields: Any) -> JobRecord:
    response = await jp_fetch(
        "j2c", "api", "jobs", method="POST", body=json.dumps(job_body(**fields))
    )
    assert response.code == 202
    return JobRecord.model_validate_json(response.body)


async def follow(
    jp_ws_fetch: Callable[..., Any], job_id: str, *, after: int = 0, stop_after: int | None = None
) -> list[Event]:
    """The events the websocket sends, until it closes (or ``stop_after`` events: then this
    client hangs up, as a closed browser tab would)."""
    ws = await jp_ws_fetch("j2c", "api", "jobs", job_id, "stream", params={"after": str(after)})
    events: list[Event] = []
    try:
        while stop_after is None or len(events) < stop_after:
            message = await asyncio.wait_for(ws.read_message(), STREAM_TIMEOUT_S)
            if message is None:
                break
            events.append(Event.model_validate_json(message))
    finally:
        ws.close()
    return events


def diary(events: list[Event]) -> list[str]:
    """Every log line as the diary shows it: the job's as written, j2c's as
    ``j2c: <phase>: <text>`` (``wire/event_frames.diary_text``)."""
    return [diary_text(e.model_dump()) for e in events if e.kind == EventKind.log]


def log_lines(events: list[Event]) -> list[str]:
    """What the job's program printed (j2c's own lines left out, by their origin)."""
    return [e.text or "" for e in events if e.kind == EventKind.log and not e.is_j2c_line]


def stage_events(events: list[Event], state: str | None = None) -> dict[str, Event]:
    """The last stage event of each stage (optionally only those in ``state``)."""
    found: dict[str, Event] = {}
    for event in events:
        if (
            event.kind == EventKind.stage
            and event.stage
            and (state is None or event.state == state)
        ):
            found[event.stage.value] = event
    return found


def final_status(events: list[Event]) -> JobStatus | None:
    statuses = [e.status for e in events if e.kind == EventKind.status]
    return statuses[-1] if statuses else None


async def sweep_children_submitted(
    service: JobService, parent: JobRecord, timeout_s: float
) -> list[JobRecord]:
    """A sweep's children, once every one has its scheduler handle (task, index or job)."""
    assert parent.sweep is not None
    async with asyncio.timeout(timeout_s):
        while True:
            children = [await service.get(c) for c in parent.sweep.children]
            if len(children) == parent.sweep.size and all(c.handle for c in children):
                return children
            await asyncio.sleep(0.1)
