"""What every backend shares about multi-node jobs (``resources.nodes > 1``).

- ``unpack_options``: the ``j2c-unpack`` options of a request's shape (``--nodes``,
  ``--launcher``, ``--nproc-per-node``); the backend starts that command once per node and sets
  ``MASTER_ADDR``, ``MASTER_PORT`` and the node's rank in its own variable (see
  ``unpack/ranks.py``).
- ``follow_ranks``: one log stream out of one follower per rank, each line tagged with its rank,
  under a compound cursor (``0:<cursor>;1:<cursor>``) so a restarted watcher resumes every rank
  where it stopped.
- ``first_failure``: the job's exit code out of the ranks' (the first non-zero one, in the order
  they ended).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import replace

from j2c_server.core.errors import InvalidInput
from j2c_server.schedulers.base import LogLine
from j2c_server.wire.api import Resources

DEFAULT_MASTER_PORT = 29500


def unpack_options(resources: Resources) -> list[str]:
    """``j2c-unpack``'s options for the request's nodes and launcher ([] for a plain job)."""
    options: list[str] = []
    if resources.nodes > 1:
        options += ["--nodes", str(resources.nodes)]
    if resources.launcher != "none":
        options += [
            "--launcher",
            resources.launcher,
            "--nproc-per-node",
            str(max(1, resources.gpus)),
        ]
    return options


def parse_rank_cursor(cursor: str | None, nodes: int) -> dict[int, str | None]:
    """Each rank's own cursor out of a compound one (None or '' starts every rank at 0)."""
    found: dict[int, str | None] = dict.fromkeys(range(nodes))
    if not cursor:
        return found
    for part in cursor.split(";"):
        rank, sep, inner = part.partition(":")
        if not sep or not rank.isdigit() or int(rank) >= nodes:
            raise InvalidInput(
                f"log cursor {cursor!r} is not a cursor of a {nodes}-rank job", field="cursor"
            )
        found[int(rank)] = inner
    return found


def rank_cursor(positions: dict[int, str | None]) -> str:
    return ";".join(f"{rank}:{inner}" for rank, inner in sorted(positions.items()) if inner)


async def follow_ranks(
    follow: Callable[[int, str | None], AsyncIterator[LogLine]],
    nodes: int,
    cursor: str | None,
) -> AsyncIterator[LogLine]:
    """Every rank's lines as they come, tagged with the rank; ends when every rank's follower
    has. A failure of one follower ends the whole stream with it (the caller resumes from the
    last cursor it kept)."""
    positions = parse_rank_cursor(cursor, nodes)
    queue: asyncio.Queue[tuple[int, LogLine | BaseException | None]] = asyncio.Queue(64)

    async def pump(rank: int) -> None:
        try:
            async for line in follow(rank, positions[rank]):
                await queue.put((rank, line))
        except Exception as exc:  # handed to the consumer, which raises it
            await queue.put((rank, exc))
            return
        await queue.put((rank, None))

    tasks = [asyncio.create_task(pump(rank)) for rank in range(nodes)]
    running = nodes
    try:
        while running:
            rank, item = await queue.get()
            if item is None:
                running -= 1
                continue
            if isinstance(item, BaseException):
                raise item
            positions[rank] = item.cursor
            yield replace(item, rank=rank, cursor=rank_cursor(positions))
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


def first_failure(codes: Sequence[int | None]) -> int | None:
    """The first non-zero exit code in the order the ranks ended, else the last known one."""
    known = [code for code in codes if code is not None]
    return next((code for code in known if code != 0), known[-1] if known else None)
