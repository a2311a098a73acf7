"""Every log file followed in one event loop is read in one worker-thread hop per round.

Real files, appended to while they are followed; the counts come from the reader itself.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from j2c_server.schedulers import logfile
from j2c_server.schedulers.logfile import follow_log_file

FILES = 20
LINES = 30


async def _collect(path: Path, ended: asyncio.Event) -> list[str]:
    return [line.text async for line in follow_log_file(path, None, ended.is_set, interval_s=0.02)]


def _count_rounds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """[rounds, tails read in them]."""
    counts = [0, 0]
    real = logfile._read_all

    def counted(batch):  # type: ignore[no-untyped-def]
        counts[0] += 1
        counts[1] += len(batch)
        return real(batch)

    monkeypatch.setattr(logfile, "_read_all", counted)
    return counts


async def test_many_files_share_each_read_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counts = _count_rounds(monkeypatch)
    paths = [tmp_path / f"job{n}.log" for n in range(FILES)]
    ended = asyncio.Event()
    followers = [asyncio.ensure_future(_collect(path, ended)) for path in paths]
    for line in range(LINES):
        for number, path in enumerate(paths):
            with path.open("a") as out:
                out.write(f"{number}:{line}\n")
        await asyncio.sleep(0.005)
    ended.set()
    results = await asyncio.wait_for(asyncio.gather(*followers), 30)
    for number, lines in enumerate(results):
        assert lines == [f"{number}:{line}" for line in range(LINES)]
    rounds, reads = counts
    # One hop per file per read before; now the files share them (most rounds read them all).
    assert reads >= FILES * 3
    assert rounds * 5 <= reads, counts


async def test_a_follower_that_stops_leaves_the_others_and_no_open_file(tmp_path: Path) -> None:
    fds_before = len(os.listdir("/proc/self/fd"))
    stays, goes = tmp_path / "stays.log", tmp_path / "goes.log"
    stays.write_text("a\n")
    goes.write_text("x\n")
    ended = asyncio.Event()
    staying = asyncio.ensure_future(_collect(stays, ended))
    going = asyncio.ensure_future(_collect(goes, ended))
    await asyncio.sleep(0.1)
    going.cancel()
    with pytest.raises(asyncio.CancelledError):
        await going
    with stays.open("a") as out:
        out.write("b\n")
    await asyncio.sleep(0.1)
    ended.set()
    assert await asyncio.wait_for(staying, 10) == ["a", "b"]
    await asyncio.sleep(0.1)  # a read queued for the cancelled follower has run by now
    assert len(os.listdir("/proc/self/fd")) == fds_before


async def test_a_file_that_cannot_be_read_fails_its_follower_only(tmp_path: Path) -> None:
    good, folder = tmp_path / "good.log", tmp_path / "a-folder"
    good.write_text("fine\n")
    folder.mkdir()  # opens, but reading it fails (EISDIR)
    ended = asyncio.Event()
    bad = asyncio.ensure_future(_collect(folder, ended))
    fine = asyncio.ensure_future(_collect(good, ended))
    with pytest.raises(IsADirectoryError):
        await asyncio.wait_for(bad, 10)
    ended.set()
    assert await asyncio.wait_for(fine, 10) == ["fine"]


def test_the_end_is_looked_for_only_after_a_quiet_interval(tmp_path: Path) -> None:
    """A job printing every other round costs reads, never end checks (a lock probe each)."""
    path = tmp_path / "job.log"
    path.write_text("")
    checks: list[int] = []
    tail = logfile._Tail(path, 0)

    def ended() -> bool:
        checks.append(1)
        return True

    for round_number in range(10):
        if round_number % 2 == 0:
            with path.open("a") as out:
                out.write(f"{round_number}\n")
        assert tail.read(ended) == (
            False,
            f"{round_number}\n".encode() if round_number % 2 == 0 else b"",
        )
    assert checks == []
    assert tail.read(ended) == (True, b"")  # the second quiet read in a row looks
    assert checks == [1]
    tail.close()
