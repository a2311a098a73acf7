"""The job registry: one SQLite file shared by processes, ordered events, leases, schema version."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from j2c_server.core.errors import ConfigError, Conflict, NotFound
from j2c_server.jobs.send.rule import attach_to
from j2c_server.registry.batch import Append
from j2c_server.registry.db import SCHEMA_VERSION
from j2c_server.registry.job_registry import Registry
from j2c_server.registry.leases import LeaseLost
from j2c_server.wire.api import EventKind, JobRecord, JobRequest, JobStatus

_WRITER = """
import asyncio, sys
from pathlib import Path
from j2c_server.registry.job_registry import Registry

async def main():
    registry = Registry(Path(sys.argv[1]))
    for i in range(int(sys.argv[3])):
        await registry.events.append(sys.argv[2], [{"kind": "log", "text": f"{sys.argv[4]}-{i}"}])
    registry.close()

asyncio.run(main())
"""


def _record(job_id: str = "job-1", key: str = "k1", *, new: bool = False) -> JobRecord:
    now = time.time()
    return JobRecord(
        id=job_id,
        name="train.py",
        key=key,
        status=JobStatus.pending,
        request=JobRequest(code_path="/p", call_path="/p/train.py", new=new),
        scheduler="local",
        created_at=now,
        updated_at=now,
    )


async def _finish(registry: Registry, status: JobStatus) -> None:
    await registry.events.append(
        "job-1",
        [{"kind": "status", "status": status}],
        change=lambda r: setattr(r, "status", status),
    )


def _pending() -> dict[str, object]:
    return {"kind": EventKind.status, "status": JobStatus.pending}


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    registry = Registry(tmp_path / "registry.sqlite3")
    yield registry
    registry.close()


async def test_first_event_of_a_new_job_has_seq_1(registry: Registry) -> None:
    record, created = await registry.jobs.create_or_attach(_record(), _pending())
    events, status = await registry.events.read(record.id)
    assert created
    assert [e.seq for e in events] == [1]
    assert status == JobStatus.pending
    assert record.last_seq == 1


async def test_writers_in_several_processes_get_distinct_consecutive_seqs(
    registry: Registry, tmp_path: Path
) -> None:
    await registry.jobs.create_or_attach(_record(), _pending())
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(registry.path), "job-1", "40", f"w{n}"]
        )
        for n in range(3)
    ]
    assert [w.wait(timeout=60) for w in writers] == [0, 0, 0]
    events, _ = await registry.events.read("job-1")
    assert [e.seq for e in events] == list(range(1, 122))
    for n in range(3):
        mine = [e.text for e in events if e.text and e.text.startswith(f"w{n}-")]
        assert mine == [f"w{n}-{i}" for i in range(40)]  # each writer's order is kept


async def test_events_after_a_seq_are_only_the_later_ones(registry: Registry) -> None:
    await registry.jobs.create_or_attach(_record(), _pending())
    await registry.events.append("job-1", [{"kind": "log", "text": str(i)} for i in range(5)])
    events, _ = await registry.events.read("job-1", after=3, limit=2)
    assert [e.seq for e in events] == [4, 5]


async def test_log_cursor_is_stored_with_the_lines_before_it(registry: Registry) -> None:
    await registry.jobs.create_or_attach(_record(), _pending())
    await registry.events.append("job-1", [{"kind": "log", "text": "a"}], log_cursor="2")
    assert await registry.events.log_cursor("job-1") == "2"


async def _send(registry: Registry, record: JobRecord) -> tuple[JobRecord, bool]:
    """A record created, or attached by the send rule's statuses (jobs/send/rule.py)."""
    return await registry.jobs.create_or_attach(record, _pending(), attach_to(record.request))


async def test_identical_request_attaches_to_the_running_job(registry: Registry) -> None:
    await _send(registry, _record("job-1"))
    record, created = await _send(registry, _record("job-2"))
    assert not created
    assert record.id == "job-1"


async def test_new_flag_creates_a_second_job_for_the_same_key(registry: Registry) -> None:
    await _send(registry, _record("job-1"))
    record, created = await _send(registry, _record("job-2", new=True))
    assert created
    assert record.id == "job-2"


async def test_identical_request_after_a_failure_runs_again(registry: Registry) -> None:
    await _send(registry, _record("job-1"))
    await _finish(registry, JobStatus.failed)
    record, created = await _send(registry, _record("job-2"))
    assert created
    assert record.id == "job-2"


async def test_a_finished_job_takes_no_more_events(registry: Registry) -> None:
    await registry.jobs.create_or_attach(_record(), _pending())
    await _finish(registry, JobStatus.succeeded)
    with pytest.raises(Conflict):
        await registry.events.append("job-1", [{"kind": "log", "text": "late"}])


async def test_writer_without_the_lease_is_refused(registry: Registry) -> None:
    await registry.jobs.create_or_attach(_record(), _pending())
    assert await registry.leases.acquire("job-1", "a", 10)
    with pytest.raises(LeaseLost):
        await registry.events.append("job-1", [{"kind": "log", "text": "x"}], owner="b")
    events, _ = await registry.events.read("job-1")
    assert [e.text for e in events if e.kind == EventKind.log] == []


async def test_lease_is_exclusive_until_it_expires(registry: Registry) -> None:
    await registry.jobs.create_or_attach(_record(), _pending())
    assert await registry.leases.acquire("job-1", "a", 0.2)
    assert not await registry.leases.acquire("job-1", "b", 10)
    await asyncio.sleep(0.3)
    assert await registry.leases.acquire("job-1", "b", 10)
    assert not await registry.leases.renew("job-1", "a", 10)
    assert await registry.leases.owner("job-1") == "b"


async def test_jobs_without_a_live_lease_are_listed_for_adoption(registry: Registry) -> None:
    await registry.jobs.create_or_attach(_record("job-1"), _pending())
    await registry.jobs.create_or_attach(_record("job-2", key="k2"), _pending())
    await registry.leases.acquire("job-1", "a", 10)
    assert await registry.leases.unowned_active() == ["job-2"]


async def test_removing_a_running_job_is_a_conflict(registry: Registry) -> None:
    await registry.jobs.create_or_attach(_record(), _pending())
    with pytest.raises(Conflict):
        await registry.jobs.remove("job-1")


async def test_removed_job_is_gone_with_its_events(registry: Registry) -> None:
    await registry.jobs.create_or_attach(_record(), _pending())
    await _finish(registry, JobStatus.cancelled)
    await registry.jobs.remove("job-1")
    with pytest.raises(NotFound):
        await registry.events.read("job-1")


def test_schema_version_is_recorded(tmp_path: Path) -> None:
    Registry(tmp_path / "r.sqlite3").close()
    with sqlite3.connect(tmp_path / "r.sqlite3") as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_registry_from_a_newer_j2c_is_refused(tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / "r.sqlite3") as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(ConfigError, match="newer"):
        Registry(tmp_path / "r.sqlite3")


async def test_log_appends_of_many_jobs_share_transactions_each_with_its_own_outcome(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """30 jobs' watchers appending at once: their batches are committed together (far fewer
    transactions than appends), every job's lines numbered in order once each; a job whose
    lease another process holds, and a finished job, are refused alone (their appends leave no
    row) and the others' lines land."""
    jobs = [f"job-{i}" for i in range(30)]
    for index, job_id in enumerate(jobs):
        await registry.jobs.create_or_attach(_record(job_id, f"k{index}"), _pending())
        await registry.leases.acquire(job_id, "other" if job_id == "job-7" else "me", 3600)
    await registry.events.append(
        "job-9",
        [{"kind": "status", "status": JobStatus.failed}],
        change=lambda r: setattr(r, "status", JobStatus.failed),
    )
    transactions = [0]
    real = registry.events._append_batch

    def counted(appends: list[object]) -> object:
        transactions[0] += 1
        return real(appends)  # type: ignore[arg-type]

    monkeypatch.setattr(registry.events, "_append_batch", counted)

    async def watcher(job_id: str) -> list[int] | type[Exception]:
        seqs: list[int] = []
        for batch in range(20):
            drafts = [{"kind": "log", "text": f"{job_id} {batch}.{i}"} for i in range(3)]
            try:
                events = await registry.events.append_many(
                    job_id, drafts, log_cursor=str(batch), owner="me"
                )
            except (LeaseLost, Conflict) as exc:
                return type(exc)
            seqs += [event.seq for event in events]
        return seqs

    results = dict(zip(jobs, await asyncio.gather(*(watcher(j) for j in jobs)), strict=True))
    assert results.pop("job-7") is LeaseLost
    assert results.pop("job-9") is Conflict
    assert all(seqs == list(range(2, 62)) for seqs in results.values())
    assert transactions[0] < 28 * 20 / 2  # 560 appends
    for job_id in ("job-7", "job-9"):
        events, _ = await registry.events.read(job_id)
        assert not [e for e in events if e.kind == EventKind.log]
    events, _ = await registry.events.read("job-3")
    assert [e.text for e in events[1:4]] == ["job-3 0.0", "job-3 0.1", "job-3 0.2"]
    assert await registry.events.log_cursor("job-3") == "19"


async def test_one_batch_numbers_each_jobs_appends_in_order_and_refuses_each_alone(
    registry: Registry,
) -> None:
    """A transaction's appends are checked and numbered in order (the same job twice: the
    second after the first); an invalid draft or a removed job fails that append alone, and
    what it carried (its cursor too) is not written."""
    for index, job_id in enumerate(("a", "b")):
        await registry.jobs.create_or_attach(_record(job_id, f"k{index}"), _pending())

    def line(text: str) -> dict[str, object]:
        return {"kind": "log", "stream": "stdout", "text": text}

    appends = [
        Append("a", [line("a1"), line("a2")], "10", None),
        Append("b", [line("b0"), {"kind": "status", "status": "nonsense"}], "5", None),
        Append("gone", [line("x")], "1", None),
        Append("a", [], "12", None),  # a cursor alone
        Append("a", [line("a3")], None, None),
        Append("b", [line("b1")], None, None),
    ]
    outcomes = await asyncio.to_thread(registry.events._append_batch, appends)

    assert [[w.seq for w in o] if isinstance(o, list) else type(o) for o in outcomes] == [
        [2, 3],
        ValidationError,
        NotFound,
        [],
        [4],
        [2],
    ]
    a_events, _ = await registry.events.read("a")
    b_events, _ = await registry.events.read("b")
    assert [e.text for e in a_events[1:]] == ["a1", "a2", "a3"]
    assert [e.text for e in b_events[1:]] == ["b1"]
    assert await registry.events.last_seqs(["a", "b"]) == {"a": 4, "b": 2}
    assert (await registry.events.log_cursor("a"), await registry.events.log_cursor("b")) == (
        "12",
        None,
    )


async def test_a_jobs_state_is_its_records_status_and_message(registry: Registry) -> None:
    """What a job's driver reads every second, without parsing the record."""
    await registry.jobs.create_or_attach(_record(), _pending())
    assert await registry.jobs.state("job-1") == (JobStatus.pending, None)

    def running(record: JobRecord) -> None:
        record.status, record.message = JobStatus.running, 'on node "a" ✓'

    await registry.events.append("job-1", [{"kind": "status", "status": "running"}], change=running)
    state = await registry.jobs.state("job-1")
    record = await registry.jobs.get("job-1")
    assert state == (record.status, record.message) == (JobStatus.running, 'on node "a" ✓')
    with pytest.raises(NotFound):
        await registry.jobs.state("no-such-job")


async def test_every_jobs_state_and_lease_renewal_asked_at_one_moment_is_one_thread_hop(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The once-a-second checks of 30 jobs' drivers: their state reads are one query, their
    lease renewals one transaction; an unknown job and a lease another process holds are
    those callers' answers alone."""
    jobs = [f"job-{i}" for i in range(30)]
    for index, job_id in enumerate(jobs):
        await registry.jobs.create_or_attach(_record(job_id, f"k{index}"), _pending())
        await registry.leases.acquire(job_id, "other" if job_id == "job-7" else "me", 3600)
    hops: list[str] = []
    real_call = registry.db.call

    async def counted(fn: Any, *args: Any) -> Any:
        hops.append(fn.__name__)
        return await real_call(fn, *args)

    monkeypatch.setattr(registry.db, "call", counted)

    states = await asyncio.gather(
        *(registry.jobs.state(job_id) for job_id in [*jobs, "job-3"]),
        registry.jobs.state("gone"),
        return_exceptions=True,
    )
    assert hops == ["_states"]
    assert all(state.status == JobStatus.pending for state in states[:31])  # type: ignore[union-attr]
    assert isinstance(states[31], NotFound)

    renewed = await asyncio.gather(*(registry.leases.renew(j, "me", 60) for j in jobs))
    assert hops == ["_states", "_renew"]
    assert renewed == [job_id != "job-7" for job_id in jobs]
