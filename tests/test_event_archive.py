"""Compacting finished jobs' events into their stored logs (``event_archive``), on a real
registry file: every read gives the same events before and after, for every ``after`` and
``limit``; a crash between writing the archive and deleting the rows loses and duplicates
nothing; modes; removal; running jobs and the setting off compact nothing; bad settings fail
naming the key."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import zstandard

from j2c_server.config import load_settings, validate_settings
from j2c_server.core.errors import ConfigError, NotFound
from j2c_server.registry import archive as event_archive
from j2c_server.registry.archive import Compactor, compact_round, write_archive
from j2c_server.registry.db import connect as _connect
from j2c_server.registry.job_registry import REGISTRY_FILE, Registry
from j2c_server.wire.api import Event
from tests.support.event_logs import make_job

T = TypeVar("T")
AFTERS = [-3, 0, 1, 2, 99, 127, 128, 129, 255, 256, 257, 258, 10_000]
LIMITS: list[int | None] = [None, -1, 0, 1, 2, 100, 128, 256, 257, 1000]


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


async def snapshot(registry: Registry, job_id: str) -> dict[Any, Any]:
    """Every page of every (after, limit) as JSON, and last_log_lines of several counts."""
    pages: dict[Any, Any] = {}
    for after in AFTERS:
        for limit in LIMITS:
            events, status = await registry.events.read(job_id, after, limit)
            pages[after, limit] = (
                [e.model_dump_json(exclude_defaults=True) for e in events],
                status,
            )
    for count in (0, 1, 3, 50, 1000):
        pages["last", count] = await registry.events.last_log_lines(job_id, count)
    return pages


def rows(data: Path, job_id: str) -> int:
    """The job's events in the registry (a row holds ``span`` of them)."""
    with sqlite3.connect(data / REGISTRY_FILE) as conn:
        (count,) = conn.execute(
            "SELECT coalesce(sum(span), 0) FROM events WHERE job_id = ?", (job_id,)
        ).fetchone()
    return int(count)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.mark.parametrize("frame_events", [event_archive.FRAME_EVENTS, 1, 10, 128])
def test_reads_are_the_same_before_and_after_compaction(
    data: Path, frame_events: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pages starting in every frame, on a frame's edge and across frames.
    monkeypatch.setattr(event_archive, "FRAME_EVENTS", frame_events)
    registry = Registry(data / REGISTRY_FILE)
    try:
        run(make_job(registry, "done-1", 254))  # 1 + 1 + 254 + 1 = 257 events
        run(make_job(registry, "running-1", 40, finish=False))
        before = run(snapshot(registry, "done-1"))
        running_before = run(snapshot(registry, "running-1"))
        assert len(before[0, None][0]) == 257

        report = compact_round(registry.path, 0, 100)

        assert (report.jobs, report.events) == (1, 257)
        assert rows(data, "done-1") == 0  # every event left the registry
        assert rows(data, "running-1") == 42  # a running job is never compacted
        archive = event_archive.archive_path(data, "done-1")
        assert not event_archive.archive_path(data, "running-1").exists()
        # A zstd file any tool reads: the frames' lines, the index frame passed over.
        whole = zstandard.ZstdDecompressor().stream_reader(
            archive.read_bytes(), read_across_frames=True
        )
        assert whole.readall().decode().splitlines() == before[0, None][0]
        assert run(snapshot(registry, "done-1")) == before
        assert run(snapshot(registry, "running-1")) == running_before
        # Nothing is left to do: a second round compacts nothing, reads stay the same.
        assert compact_round(registry.path, 0, 100).jobs == 0
        assert run(snapshot(registry, "done-1")) == before
    finally:
        registry.close()


def test_only_jobs_older_than_the_setting_and_a_bounded_number_per_round(data: Path) -> None:
    registry = Registry(data / REGISTRY_FILE)
    try:
        for i in range(5):
            run(make_job(registry, f"done-{i}", 3))
        assert compact_round(registry.path, 3600, 100).jobs == 0  # finished just now
        first = compact_round(registry.path, 0, 2)
        assert (first.jobs, first.more) == (2, True)
        assert compact_round(registry.path, 0, 2).jobs == 2
        last = compact_round(registry.path, 0, 2)
        assert (last.jobs, last.more) == (1, False)
    finally:
        registry.close()


CRASH_AFTER_ARCHIVE = """
import os, sys
from pathlib import Path
from j2c_server.registry.archive import write_archive
from j2c_server.registry.db import connect as _connect
data = Path(sys.argv[1])
write_archive(_connect(data / "registry.sqlite3"), data, "done-1")
os._exit(9)  # dies between the archive's rename and the rows' delete
"""


def test_a_crash_between_archive_and_delete_loses_and_duplicates_nothing(data: Path) -> None:
    registry = Registry(data / REGISTRY_FILE)
    try:
        run(make_job(registry, "done-1", 100))
        before = run(snapshot(registry, "done-1"))
        crashed = subprocess.run(
            [sys.executable, "-c", CRASH_AFTER_ARCHIVE, str(data)], env=os.environ, check=False
        )
        assert crashed.returncode == 9
        archive = event_archive.archive_path(data, "done-1")
        assert archive.is_file() and rows(data, "done-1") == 103
        assert run(snapshot(registry, "done-1")) == before  # the leftover is ignored

        # A leftover from an older crash may be anything: the next round rewrites it.
        archive.write_bytes(zstandard.ZstdCompressor().compress(b'{"garbage": 1}\n'))
        assert run(snapshot(registry, "done-1")) == before
        assert compact_round(registry.path, 0, 10).jobs == 1
        assert rows(data, "done-1") == 0
        assert run(snapshot(registry, "done-1")) == before
    finally:
        registry.close()


def test_a_crash_while_writing_leaves_only_a_temporary_file_that_is_swept(
    data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = Registry(data / REGISTRY_FILE)
    try:
        run(make_job(registry, "done-1", 100))
        before = run(snapshot(registry, "done-1"))

        def fail(src: Any, dst: Any) -> None:
            raise OSError("disk full")

        monkeypatch.setattr(event_archive.os, "replace", fail)
        with (
            pytest.raises(OSError, match="disk full"),
            contextlib.closing(_connect(registry.path)) as conn,
        ):
            write_archive(conn, data, "done-1")
        monkeypatch.undo()
        folder = event_archive.archive_dir(data)
        assert list(folder.iterdir()) == []  # the temporary file went with the error
        assert run(snapshot(registry, "done-1")) == before

        # A process killed mid-write leaves its temporary file: swept once it is stale.
        stale = folder / f".done-1.1.abcd{event_archive.TMP_SUFFIX}"
        stale.write_bytes(b"partial")
        os.utime(stale, (time.time() - 2 * event_archive.TMP_STALE_S,) * 2)
        assert compact_round(registry.path, 0, 10).jobs == 1
        assert sorted(p.name for p in folder.iterdir()) == [f"done-1{event_archive.SUFFIX}"]
        assert run(snapshot(registry, "done-1")) == before
    finally:
        registry.close()


def test_archive_modes_are_private_whatever_the_umask(data: Path) -> None:
    registry = Registry(data / REGISTRY_FILE)
    old = os.umask(0)
    try:
        run(make_job(registry, "done-1", 5))
        compact_round(registry.path, 0, 10)
    finally:
        os.umask(old)
        registry.close()
    folder = event_archive.archive_dir(data)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(event_archive.archive_path(data, "done-1").stat().st_mode) == 0o600


def test_removing_a_job_removes_its_archive_and_orphans_are_swept(data: Path) -> None:
    registry = Registry(data / REGISTRY_FILE)
    try:
        run(make_job(registry, "done-1", 5))
        run(make_job(registry, "done-2", 5))
        compact_round(registry.path, 0, 10)
        run(registry.jobs.remove("done-1"))
        assert not event_archive.archive_path(data, "done-1").exists()
        with pytest.raises(NotFound):
            run(registry.events.read("done-1"))
        # An archive whose job is gone (a removal racing a crashed compactor) is swept.
        orphan = event_archive.archive_path(data, "gone-9")
        orphan.write_bytes(b"")
        compact_round(registry.path, 0, 10)
        assert not orphan.exists()
        assert len(run(registry.events.read("done-2"))[0]) == 8
    finally:
        registry.close()


@pytest.mark.parametrize("off", [None, -1, "never"])
def test_the_setting_off_compacts_nothing(data: Path, off: Any) -> None:
    settings = validate_settings({"registry": {"compact_after_hours": off}}).registry
    assert settings.compact_after_s() is None

    async def main() -> bool:
        registry = Registry(data / REGISTRY_FILE)
        try:
            await make_job(registry, "done-1", 5)
            compactor = Compactor(registry.events, settings)
            compactor.start()
            await asyncio.sleep(0.3)
            started = compactor._task is not None
            await compactor.stop()
            return started
        finally:
            registry.close()

    assert run(main()) is False
    assert rows(data, "done-1") == 8
    assert not event_archive.archive_dir(data).exists()


def test_the_periodic_task_compacts_at_start(data: Path) -> None:
    settings = validate_settings({"registry": {"compact_after_hours": 0}}).registry

    async def main() -> list[Event]:
        registry = Registry(data / REGISTRY_FILE)
        try:
            await make_job(registry, "done-1", 5)
            compactor = Compactor(registry.events, settings)
            compactor.start()
            for _ in range(100):
                if rows(data, "done-1") == 0:
                    break
                await asyncio.sleep(0.05)
            await compactor.stop()
            return (await registry.events.read("done-1"))[0]
        finally:
            registry.close()

    assert len(run(main())) == 8
    assert rows(data, "done-1") == 0


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("compact_after_hours", "soon", "registry.compact_after_hours: Input should be a valid"),
        ("compact_after_hours", "nan", "registry.compact_after_hours: Input should be a finite"),
        ("compact_every_minutes", 0, "registry.compact_every_minutes: Input should be greater"),
        ("compact_jobs_per_round", 0, "registry.compact_jobs_per_round: Input should be greater"),
        ("compact_later", 1, "registry.compact_later: Extra inputs are not permitted"),
    ],
)
def test_bad_settings_are_config_errors_naming_the_key(key: str, value: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate_settings({"registry": {key: value}})


def test_settings_from_the_environment() -> None:
    env = {"J2C_REGISTRY__COMPACT_AFTER_HOURS": "0.5"}
    assert load_settings(environ=env, config_file=None).registry.compact_after_s() == 1800
    assert validate_settings({}).registry.compact_after_s() == 24 * 3600
    with pytest.raises(ConfigError, match=r"registry\.compact_after_hours"):
        load_settings(environ={"J2C_REGISTRY__COMPACT_AFTER_HOURS": "1 day"})


def test_a_job_removed_while_its_archive_is_written_leaves_no_archive(data: Path) -> None:
    registry = Registry(data / REGISTRY_FILE)
    try:
        run(make_job(registry, "done-1", 5))
        with contextlib.closing(_connect(registry.path)) as conn:
            written = write_archive(conn, data, "done-1")
            assert written is not None and written.path.is_file()
            stored = written.path.read_bytes()
            run(registry.jobs.remove("done-1"))  # removes the archive too...
            written.path.write_bytes(stored)  # ...but this compactor's rename came after it
            assert event_archive.commit_archive(conn, data, written) is False
        assert not written.path.exists()
        assert rows(data, "done-1") == 0
    finally:
        registry.close()


@pytest.fixture
def registry(data: Path) -> Iterator[Registry]:
    opened = Registry(data / REGISTRY_FILE)
    yield opened
    opened.close()


def _same_job(pages: dict[Any, Any], job_id: str) -> str:
    """The snapshot with the job's id and the events' times left out."""
    text = re.sub(r'"time":[0-9.e+-]+', '"time":0', repr(pages).replace(job_id, "JOB"))
    return text.replace(job_id, "JOB")


def test_a_batch_stored_as_one_row_reads_as_events_stored_one_per_row(
    data: Path, registry: Registry
) -> None:
    """Every page, replay and last lines of a job whose lines are stored one row per watcher
    batch are those of the same job stored one row per event, before and after compaction."""
    run(make_job(registry, "single-1", 300, batch_rows=False))
    run(make_job(registry, "batch-01", 300, batch_rows=True))
    single = run(snapshot(registry, "single-1"))
    batched = run(snapshot(registry, "batch-01"))
    assert _same_job(batched, "batch-01") == _same_job(single, "single-1")
    with sqlite3.connect(data / REGISTRY_FILE) as conn:
        (stored,) = conn.execute("SELECT count(*) FROM events WHERE job_id = 'batch-01'").fetchone()
    assert stored < 20 and rows(data, "batch-01") == 303  # 303 events in a few rows
    assert compact_round(registry.path, 0, 100).jobs == 2
    assert run(snapshot(registry, "batch-01")) == batched


def test_the_last_line_holding_a_text_is_found_in_a_batch_row(registry: Registry) -> None:
    run(make_job(registry, "batch-01", 100, batch_rows=True, finish=False))
    assert run(registry.events.last_log_line_with("batch-01", "😀")) == "é€ 😀 97"
    assert run(registry.events.last_log_line_with("batch-01", 'LINE "QUOTED"')) == (
        'line "quoted" \\ tab\t 96'
    )
    assert run(registry.events.last_log_line_with("batch-01", "nowhere")) is None


def test_a_registry_of_one_event_per_row_is_migrated_and_reads_the_same(data: Path) -> None:
    """A registry written before batch rows (schema version 4) gains the rows' span and reads
    unchanged; new batches then go in as one row each."""
    registry = Registry(data / REGISTRY_FILE)
    try:
        run(make_job(registry, "single-1", 120, batch_rows=False, finish=False))
        before = run(snapshot(registry, "single-1"))
    finally:
        registry.close()
    with sqlite3.connect(data / REGISTRY_FILE) as conn:  # as version 4 left it
        conn.execute("ALTER TABLE events DROP COLUMN span")
        conn.execute("PRAGMA user_version = 4")
    registry = Registry(data / REGISTRY_FILE)
    try:
        assert run(snapshot(registry, "single-1")) == before
        lines = [{"kind": "log", "text": f"after {i}"} for i in range(5)]
        events = run(registry.events.append_many("single-1", lines))
        assert [e.seq for e in events] == [123, 124, 125, 126, 127]
        read, _ = run(registry.events.read("single-1", 124, 2))
        assert [e.text for e in read] == ["after 2", "after 3"]
        assert rows(data, "single-1") == 127
    finally:
        registry.close()
