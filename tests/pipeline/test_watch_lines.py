"""The watcher's lines on their way from its reader to its writer: taken in one step, in order,
bounded (the reader waits for room), and the end comes after the last line."""

from __future__ import annotations

import asyncio

from j2c_server.jobs.drive.watch import _Line, _Lines


def _line(n: int) -> _Line:
    return _Line({"kind": "log", "text": f"line {n}"}, cursor=str(n))


async def test_lines_are_taken_together_in_order_and_the_reader_waits_for_room() -> None:
    lines = _Lines(limit=3)
    added: list[int] = []

    async def reader() -> None:
        for n in range(7):
            if lines.full():
                await lines.room()
            lines.add(_line(n))
            added.append(n)
        lines.end()

    task = asyncio.ensure_future(reader())
    await asyncio.sleep(0.05)
    assert added == [0, 1, 2]  # full: the reader waits, nothing is dropped
    taken = [line.cursor for line in await lines.take(2)]
    assert taken == ["0", "1"]
    rest: list[str] = []
    while batch := await lines.take(100):
        rest += [line.cursor for line in batch]
    await task
    assert rest == [str(n) for n in range(2, 7)]
    assert await lines.take(100) == []  # ended: stays ended


async def test_a_writer_waits_for_the_first_line_or_the_end() -> None:
    lines = _Lines(limit=10)
    waiting = asyncio.ensure_future(lines.take(5))
    await asyncio.sleep(0.02)
    assert not waiting.done()
    lines.add(_line(1))
    assert [line.draft["text"] for line in await asyncio.wait_for(waiting, 1)] == ["line 1"]
    ended = asyncio.ensure_future(lines.take(5))
    await asyncio.sleep(0.02)
    lines.end()
    assert await asyncio.wait_for(ended, 1) == []
