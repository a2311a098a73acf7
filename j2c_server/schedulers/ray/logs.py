"""A Ray job's log, followed incrementally: the dashboard's tail websocket
(``/api/jobs/{id}/logs/tail``) streams the log from its start and then as it grows, and closes
once the job has ended, so nothing is downloaded twice while a job runs (polling
``GET /api/jobs/{id}/logs`` re-read the whole log every poll).

The cursor is the count of the log's lines already delivered (Ray's own included), so a new
follower (a restarted server) reconnects and skips exactly those. Ray's own lines are counted
but not delivered (:class:`RayLines`): its logger's lines before the entrypoint's first, and
its "Running entrypoint for job …" line wherever it lands (Ray writes it through a buffered
file, so the entrypoint's first lines can come before it; an entrypoint with a newline in an
argument spans more than one line).
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, AsyncIterator

from j2c_server.schedulers.base import LogLine

_RAY_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+\t[A-Z]+ \S+:\d+ -- ")


class RayLines:
    """Which of a log's lines, in order, Ray wrote itself."""

    def __init__(self, ray_id: str, entrypoint: str) -> None:
        self._header = f"Running entrypoint for job {ray_id}: "
        self._header_lines = entrypoint.count("\n") + 1
        self._leading = True  # still in Ray's logger lines before anything else
        self._skip = 0  # lines left of the entrypoint header
        self._seen_header = False

    def is_ray(self, line: str) -> bool:
        if self._skip:
            self._skip -= 1
            return True
        if not self._seen_header and line.startswith(self._header):
            self._seen_header = True
            self._skip = self._header_lines - 1
            return True
        if self._leading and _RAY_LOG_LINE.match(line):
            return True
        self._leading = False
        return False


async def follow_lines(
    chunks: AsyncIterator[str], ray_id: str, entrypoint: str, done: int
) -> AsyncGenerator[LogLine, None]:
    """The job's own lines out of the tail's text chunks, after the first ``done`` lines; a
    last line without its newline is delivered when the stream ends (the job has)."""
    ray = RayLines(ray_id, entrypoint)
    seen = 0
    pending = ""

    def take(line: str) -> LogLine | None:
        nonlocal seen
        seen += 1
        own = ray.is_ray(line)  # classified in order, skipped or not: its state follows
        return None if own or seen <= done else LogLine(text=line, cursor=str(seen))

    async for chunk in chunks:
        pending += chunk
        *lines, pending = pending.split("\n")
        for line in lines:
            if (item := take(line)) is not None:
                yield item
    if pending and (item := take(pending)) is not None:
        yield item
