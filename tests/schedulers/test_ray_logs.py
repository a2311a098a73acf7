"""A Ray job's log as the tail websocket streams it (``schedulers/ray/logs.py``): lines cut
across chunks put back together, Ray's own lines counted but not delivered, a cursor that
resumes exactly after the lines delivered, and a last line without its newline kept."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

from j2c_server.schedulers.ray.logs import follow_lines

RAY_ID = "raysubmit_abc"
ENTRY = 'exec j2c-unpack file:///m.json -- "a\nb"'  # an argument with a newline: 2 lines
LOG = (
    "2026-12-05 05:26:15,510\tINFO job_manager.py:581 -- Runtime env is setting up.\n"
    "user 1\n"  # the entrypoint's first line, before Ray's buffered header
    f'Running entrypoint for job {RAY_ID}: exec j2c-unpack file:///m.json -- "a\n'
    'b"\n'
    "2026-12-05 05:26:16,000\tINFO looks:1 -- like Ray's, but the user's\n"
    "user 2\n"
    "last without newline"
)


async def _chunks(parts: Sequence[str]) -> AsyncIterator[str]:
    for part in parts:
        yield part


def _follow(parts: Sequence[str], done: int = 0) -> list[tuple[str, str]]:
    async def run() -> list[tuple[str, str]]:
        lines = follow_lines(_chunks(parts), RAY_ID, ENTRY, done)
        return [(line.text, line.cursor) async for line in lines]

    return asyncio.run(run())


def test_the_users_lines_whatever_the_chunks() -> None:
    expected = [
        ("user 1", "2"),
        ("2026-12-05 05:26:16,000\tINFO looks:1 -- like Ray's, but the user's", "5"),
        ("user 2", "6"),
        ("last without newline", "7"),
    ]
    assert _follow([LOG]) == expected
    assert _follow([LOG[i : i + 7] for i in range(0, len(LOG), 7)]) == expected
    assert _follow(list(LOG)) == expected  # one character a message


def test_a_follower_resumes_after_the_lines_already_delivered() -> None:
    assert _follow([LOG], done=5) == [("user 2", "6"), ("last without newline", "7")]
    assert _follow([LOG], done=7) == []
