"""Followers of a job: pushed, not polled, and every event exactly once whatever they do.

Jobs here are rows written straight into a real registry (by this process through a
``Journal``, or by another process), so the tests control exactly when each event lands.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from j2c_server.config import load_settings
from j2c_server.core.errors import NotFound
from j2c_server.jobs import fanout as eventbus
from j2c_server.jobs.journal import Journal
from j2c_server.jobs.service import JobService
from j2c_server.wire.api import Event, EventKind, JobRecord, JobRequest, JobStatus

_WRITER = """
import asyncio, sys
from pathlib import Path
from j2c_server.wire.api import JobStatus
from j2c_server.registry.job_registry import Registry

async def main():
    registry = Registry(Path(sys.argv[1]))
    for i in range(int(sys.argv[3])):
        await registry.events.append(sys.argv[2], [{"kind": "log", "text": f"elsewhere {i}"}])
    await registry.events.append(sys.argv[2], [{"kind": "status", "status": "succeeded"}],
                          change=lambda r: setattr(r, "status", JobStatus.succeeded))
    registry.close()

asyncio.run(main())
"""


@asynccontextmanager
async def _service() -> AsyncIterator[JobService]:
    service = JobService(load_settings())
    try:
        yield service
    finally:
        await service.stop()


async def _running_job(service: JobService, job_id: str = "job") -> str:
    now = time.time()
    record = JobRecord(
        id=job_id,
        name="x",
        key=job_id,
        status=JobStatus.running,
        request=JobRequest(code_path="/p", call_path="/p/x.py"),
        scheduler="local",
        created_at=now,
        updated_at=now,
    )
    await service.registry.jobs.create_or_attach(
        record, {"kind": EventKind.status, "status": "running"}
    )
    # Somebody drives it: a quiet follower must not take it over during the test.
    await service.registry.leases.acquire(job_id, "someone-else", 3600)
    return job_id


async def _finish(journal: Journal) -> None:
    await journal.write(
        [{"kind": EventKind.status, "status": JobStatus.succeeded}],
        change=lambda r: setattr(r, "status", JobStatus.succeeded),
    )


def _seqs(events: list[Event]) -> list[int]:
    return [e.seq for e in events]


async def _collect(service: JobService, job_id: str, after: int = 0) -> list[Event]:
    return [e async for e in service.stream(job_id, after)]


def _count_calls(monkeypatch: pytest.MonkeyPatch, registry: object, name: str) -> list[int]:
    """Count the registry's synchronous ``name`` calls (what each async method runs)."""
    calls = [0]
    real = getattr(registry, name)

    def counted(*args: Any) -> Any:
        calls[0] += 1
        return real(*args)

    monkeypatch.setattr(registry, name, counted)
    return calls


async def test_idle_followers_cost_no_registry_reads_and_other_writers_reach_all(
    j2c_data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """100 followers of a quiet job: no reads of its events while nothing happens (one poll
    per 50 ms each before), then another process's lines reach every follower, once each."""
    async with _service() as service:
        job_id = await _running_job(service)
        followers = [asyncio.ensure_future(_collect(service, job_id)) for _ in range(100)]
        await asyncio.sleep(0.5)  # every follower has replayed the first event
        reads = _count_calls(monkeypatch, service.registry.events, "_read_events")
        await asyncio.sleep(1.0)
        assert reads[0] == 0
        polls = _count_calls(monkeypatch, service.registry.events, "_last_seqs")
        await asyncio.sleep(0.5)
        assert polls[0] <= 0.5 / eventbus.POLL_S + 2  # one shared poll, not one per follower

        writer = subprocess.run(
            [sys.executable, "-c", _WRITER, str(service.registry.path), job_id, "50"],
            timeout=60,
            check=True,
        )
        assert writer.returncode == 0
        results = await asyncio.wait_for(asyncio.gather(*followers), 20)
        expected = list(range(1, 53))  # running, 50 lines, succeeded
        assert all(_seqs(events) == expected for events in results)
        assert [e.text for e in results[0][1:-1]] == [f"elsewhere {i}" for i in range(50)]
        # The feed read each batch once for all 100 followers.
        assert reads[0] <= 5


async def test_a_slow_follower_is_caught_up_from_the_registry_not_buffered(
    j2c_data_dir: Path,
) -> None:
    """A follower that stops reading holds at most FOLLOWER_BUFFER events; once it reads again
    it gets every event once, in order, like a fast follower beside it."""
    async with _service() as service:
        job_id = await _running_job(service)
        journal = Journal(service.registry, service.bus, job_id)
        fast = asyncio.ensure_future(_collect(service, job_id))
        slow = service.stream(job_id)
        first = [await anext(slow)]  # the replay
        await asyncio.sleep(0.1)
        second = asyncio.ensure_future(anext(slow))  # caught up: it waits for the feed
        await asyncio.sleep(0.1)
        await journal.write([{"kind": EventKind.log, "text": "live"}])
        first.append(await asyncio.wait_for(second, 5))  # then it stops reading
        total = 4 * eventbus.FOLLOWER_BUFFER
        most = 0
        for start in range(0, total, 64):
            await journal.write(
                [{"kind": EventKind.log, "text": str(i)} for i in range(start, start + 64)]
            )
            await asyncio.sleep(0.01)  # let the feed fan each batch out
            most = max(most, *(len(f.queue) for f in service.fanout._feeds[job_id].followers))
        assert most == eventbus.FOLLOWER_BUFFER  # filled up to the bound, never past it
        total += 1  # the "live" line
        await _finish(journal)
        rest = [e async for e in slow]
        expected = list(range(1, total + 3))
        assert _seqs(first + rest) == expected
        assert _seqs(await asyncio.wait_for(fast, 10)) == expected


async def test_followers_joining_mid_stream_get_exactly_the_events_after_their_seq(
    j2c_data_dir: Path,
) -> None:
    """Followers that join while lines arrive, each from its own ``after`` (a replay racing
    the live feed), get exactly seq after+1 .. last: none lost, none doubled."""
    async with _service() as service:
        job_id = await _running_job(service)
        journal = Journal(service.registry, service.bus, job_id)
        rng = random.Random(19)
        joined: list[tuple[int, asyncio.Future[list[Event]]]] = []
        last = 1
        for batch in range(60):
            size = rng.randint(1, 40)
            record = await journal.write([{"kind": EventKind.log, "text": f"{batch}"}] * size)
            last = record.last_seq
            for _ in range(rng.randint(0, 3)):
                after = rng.randint(0, last)
                joined.append((after, asyncio.ensure_future(_collect(service, job_id, after))))
            await asyncio.sleep(rng.choice([0, 0, 0.001, 0.01]))
        await _finish(journal)
        final = last + 1
        for after, follower in joined:
            assert _seqs(await asyncio.wait_for(follower, 20)) == list(range(after + 1, final + 1))
        assert len(joined) > 30
        assert not service.fanout._feeds  # the last follower to leave closed the job's feed


async def test_a_finished_job_replays_and_ends_and_a_removed_one_is_not_found(
    j2c_data_dir: Path,
) -> None:
    async with _service() as service:
        job_id = await _running_job(service)
        journal = Journal(service.registry, service.bus, job_id)
        await journal.write([{"kind": EventKind.log, "text": "only"}])
        waiting = asyncio.ensure_future(_collect(service, job_id, after=2))
        await _finish(journal)
        assert _seqs(await asyncio.wait_for(waiting, 10)) == [3]
        assert _seqs(await _collect(service, job_id)) == [1, 2, 3]
        assert await _collect(service, job_id, after=3) == []

        other = await _running_job(service, "other")
        follower = asyncio.ensure_future(_collect(service, other, after=1))
        await asyncio.sleep(0.2)
        # Ended without an event (the registry removes only finished jobs), then removed: no
        # event tells the feed, the poller sees the row gone.
        await service.registry.events.append(
            other, [], change=lambda r: setattr(r, "status", JobStatus.failed)
        )
        await service.registry.jobs.remove(other)
        with pytest.raises(NotFound):
            await asyncio.wait_for(follower, 10)


async def test_this_process_writes_reach_followers_without_reading_them_back(
    j2c_data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job's own watcher writes in this process: each batch is handed to the feed with its
    wake-up, so 200 batches to 3 followers cost (almost) no events read (one per batch before).
    Another process's lines after them (a gap in what was handed over) still reach every
    follower, in order, once."""
    async with _service() as service:
        job_id = await _running_job(service)
        journal = Journal(service.registry, service.bus, job_id)
        followers = [asyncio.ensure_future(_collect(service, job_id)) for _ in range(3)]
        await asyncio.sleep(0.3)  # replayed, caught up: fed by the feed from here on
        reads = _count_calls(monkeypatch, service.registry.events, "_read_events")
        for batch in range(200):
            await journal.write_events(
                [{"kind": EventKind.log, "text": f"{batch}.{i}"} for i in range(3)],
                log_cursor=str(batch),
            )
            if batch % 20 == 0:
                await asyncio.sleep(0.01)
        # A few reads at most: the poller may see a commit before its hand-over arrives.
        assert reads[0] <= 10
        before = reads[0]
        subprocess.run(
            [sys.executable, "-c", _WRITER, str(service.registry.path), job_id, "5"],
            timeout=60,
            check=True,
        )
        results = await asyncio.wait_for(asyncio.gather(*followers), 20)
        stored = await service.events(job_id)
        assert len(stored) == 1 + 600 + 5 + 1
        assert all(events == stored for events in results)
        # The other process's six commits: read by the feed for all three followers, not by
        # each of them (that would be up to 3 x 6 reads).
        assert reads[0] - before <= 3


async def test_what_arrives_together_reaches_a_follower_as_one_batch(j2c_data_dir: Path) -> None:
    """A live follower takes everything queued for it in one step (a viewer of a job printing a
    hundred lines a second costs a few steps, not one per line), in order, and its last batch
    ends with the terminal status event, nothing after it."""
    async with _service() as service:
        job_id = await _running_job(service)
        journal = Journal(service.registry, service.bus, job_id)
        batches: list[list[int]] = []

        async def follow() -> None:
            async for batch in service.stream_wire(job_id):
                batches.append([event.seq for event in batch])
                await asyncio.sleep(0.05)  # a slow step: what arrives meanwhile queues up

        follower = asyncio.ensure_future(follow())
        await asyncio.sleep(0.2)  # replayed (seq 1), live from here on
        for batch in range(10):
            await journal.write_events(
                [{"kind": EventKind.log, "text": f"{batch}.{i}"} for i in range(20)],
                log_cursor=str(batch),
            )
        await _finish(journal)
        await asyncio.wait_for(follower, 10)
    seqs = [seq for batch in batches for seq in batch]
    assert seqs == list(range(1, 1 + 1 + 200 + 1))
    assert len(batches) <= 5, [len(batch) for batch in batches]
    assert max(len(batch) for batch in batches) >= 100


async def test_a_commit_whose_hand_over_never_comes_still_reaches_followers(
    j2c_data_dir: Path,
) -> None:
    """The poller leaves a job this process is writing to that write's hand-over (one round):
    a write that committed but never handed its events over (its writer stuck) is still
    delivered, by the poller's next round."""
    async with _service() as service:
        job_id = await _running_job(service)
        got: list[str | None] = []

        async def follow() -> None:
            async for event in service.stream(job_id):
                got.append(event.text)

        follower = asyncio.ensure_future(follow())
        await asyncio.sleep(0.3)  # replayed, live from here on
        with service.bus.writing(job_id):  # in flight, and never published
            await service.registry.events.append_many(
                job_id, [{"kind": EventKind.log, "text": "committed"}]
            )
            started = time.monotonic()
            while "committed" not in got:
                assert time.monotonic() - started < 5, got
                await asyncio.sleep(0.01)
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follower
