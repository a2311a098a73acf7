"""A training loop that checkpoints and resumes, as a user's script would, for the tests of
attempts on every backend: it writes ``checkpoints/step_NNNN`` (by temp file and rename) each
step, and resumes from ``$J2C_RESUMED_FROM`` when j2c restored one."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

from j2c_server.wire.api import Event, EventKind
from j2c_server.wire.event_frames import diary_text

if TYPE_CHECKING:
    from j2c_server.jobs.service import JobService

RESUMABLE_PY = """\
import os, pathlib, sys, time

steps, pause = int(sys.argv[1]), float(sys.argv[2])
folder = pathlib.Path("checkpoints")
folder.mkdir(exist_ok=True)
resumed = os.environ.get("J2C_RESUMED_FROM")
start = int(pathlib.Path(resumed).read_text()) + 1 if resumed else 0
print(f"attempt {os.environ.get('J2C_ATTEMPT')} starts at step {start} from {resumed}", flush=True)
for step in range(start, steps):
    partial = folder / f".step_{step:04d}.tmp"
    partial.write_text(str(step))
    os.replace(partial, folder / f"step_{step:04d}")
    print(f"step {step}", flush=True)
    time.sleep(pause)
print(f"done at step {steps - 1}", flush=True)
"""

_START = re.compile(r"^attempt (\d+) starts at step (\d+) from (\S+)$")
_STEP = re.compile(r"^step (\d+)$")


def write_resumable(project: Path) -> Path:
    project.mkdir(parents=True, exist_ok=True)
    script = project / "resumable.py"
    script.write_text(RESUMABLE_PY)
    return script


def starts(lines: list[str]) -> list[tuple[int, int, str]]:
    """(attempt, first step, restored checkpoint) of each start the job printed."""
    found = []
    for line in lines:
        match = _START.match(line.strip())
        if match:
            found.append((int(match[1]), int(match[2]), match[3]))
    return found


def last_step(lines: list[str]) -> int | None:
    steps = [int(m[1]) for line in lines if (m := _STEP.match(line.strip()))]
    return steps[-1] if steps else None


def resume_bytes(lines: list[str]) -> str:
    """What the resumed (last) attempt moved, from its ``j2c: summary:`` line: the checkpoint
    restored and the layers downloaded (reused ones come from the node's cache)."""
    summaries = [
        json.loads(line.removeprefix("j2c: summary: "))
        for line in lines
        if line.startswith("j2c: summary: ")
    ]
    last = summaries[-1]
    moved = last["bytes_downloaded"] + last["bytes_restored"]
    return (
        f"{moved} B moved ({last['bytes_restored']} B of checkpoint, "
        f"{last['bytes_downloaded']} B of layers, {last['bytes_reused']} B reused from the node "
        "cache)"
    )


async def first_line(
    service: JobService, job_id: str, wanted: str, *, after: int = 0, timeout_s: float = 120
) -> Event:
    """The first log event at or after seq ``after`` whose line, as the diary shows it (j2c's
    as ``j2c: <phase>: text``), contains ``wanted``."""
    async with asyncio.timeout(timeout_s):
        while True:
            for event in await service.events(job_id, after):
                if event.kind == EventKind.log and wanted in diary_text(
                    event.model_dump(mode="json")
                ):
                    return event
            await asyncio.sleep(0.1)
