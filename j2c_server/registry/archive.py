"""Compacting a finished job's events out of the registry into the job's stored log, and reading
them back from there exactly as the registry would have returned them.

A terminal job's log never changes (the registry refuses events after the terminal status), so
once it is older than ``registry.compact_after_hours`` all of its events move to one file,
``<data dir>/event-archive/<job id>.jsonl.zst`` (0600 in a 0700 folder): zstd-compressed JSON
lines, line *n* holding the event with ``seq`` *n* byte for byte as the registry stored it. Any
zstd tool reads it (``zstdcat``); j2c also finds a deep page without decompressing what comes
before: the lines are cut into frames of :data:`FRAME_EVENTS`, and a last, skippable frame (which
decompressors pass over) holds each frame's offset (:func:`_frame_index`). The
jobs list reads only the ``jobs`` table, so no event needs to stay behind. The job's new
``archived_seq`` column says how far the archive goes: events with ``seq <= archived_seq`` are
read from the file (streamed, bounded memory, stopping at the page's limit), the others from
the ``events`` table as before.

Crash safety, in this order: the archive is written under a temporary name, fsynced, renamed to
its place and its folder fsynced; only then does ONE transaction delete the rows and set
``archived_seq``. A crash before that transaction leaves the rows in place and
``archived_seq = 0``, so readers ignore the file and the next round rewrites it; a crash after
it leaves a complete archive. No event is lost or read twice at any point.

When it runs: a periodic task of the server extension (:class:`Compactor`: at start, then every
``registry.compact_every_minutes``), at most ``registry.compact_jobs_per_round`` jobs per round,
in a thread with its own sqlite connection: never on the event loop nor on the registry's pool.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import re
import secrets
import sqlite3
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import zstandard

from j2c_server.core.errors import J2CError, NotFound
from j2c_server.core.file_modes import FILE_MODE, private_dir
from j2c_server.registry.db import connect, write
from j2c_server.registry.event_rows import split_row
from j2c_server.wire.api import TERMINAL_STATUSES, Event
from j2c_server.wire.event_frames import diary_text

if TYPE_CHECKING:
    from j2c_server.registry.event_log import EventLog
    from j2c_server.registry.settings import RegistrySettings

ARCHIVE_DIR = "event-archive"
SUFFIX = ".jsonl.zst"
TMP_SUFFIX = ".tmp"
COMPRESSION_LEVEL = 3
READ_CHUNK = 64 * 1024  # decompressed bytes per read: about 400 events of a log line
FRAME_EVENTS = 1024  # events per zstd frame: a page starts at most this many lines into one
SKIPPABLE_MAGIC = 0x184D2A5A  # a zstd skippable frame (0x184D2A50..5F): the frame index
TMP_STALE_S = 3600  # a temporary archive this old was left by a crashed compactor
BACKLOG_PAUSE_S = 1.0  # between rounds while more jobs wait: the server stays responsive

# Schema: how far each job's archive goes, and the index a round's query walks.
_TERMINAL = tuple(sorted(s.value for s in TERMINAL_STATUSES))
_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}")
log = logging.getLogger("j2c")


class ArchiveCorrupt(J2CError):
    """A job's stored log does not hold what the registry says it holds."""

    status_code = 500
    code = "archive_corrupt"


# ---------------------------------------------------------------------- paths


def archive_dir(data_dir: Path) -> Path:
    return data_dir / ARCHIVE_DIR


def archive_path(data_dir: Path, job_id: str) -> Path:
    # Job ids are j2c's own (date-time-hex); anything else must not name a path outside.
    if not _SAFE_ID.fullmatch(job_id):
        raise NotFound(f"no job {job_id!r}", field="job_id")
    return archive_dir(data_dir) / f"{job_id}{SUFFIX}"


def remove_archive(data_dir: Path, job_id: str) -> None:
    """Delete a job's stored log (the job was removed); no-op when it has none."""
    with contextlib.suppress(FileNotFoundError, NotFound):
        archive_path(data_dir, job_id).unlink()


# ---------------------------------------------------------------------- reading


def _frame_index(raw: BinaryIO) -> tuple[int, list[int]]:
    """The lines per frame and each frame's offset, from the archive's last frame: ``magic,
    size, JSON, u32 length of the JSON``; ``(0, [])`` when unreadable (then: read from 0)."""
    with contextlib.suppress(OSError, ValueError, struct.error, KeyError, TypeError):
        end = raw.seek(0, os.SEEK_END)
        raw.seek(end - 4)
        (length,) = struct.unpack("<I", raw.read(4))
        raw.seek(end - 12 - length)
        magic, size = struct.unpack("<II", raw.read(8))
        if magic == SKIPPABLE_MAGIC and size == length + 4:
            index = json.loads(raw.read(length))
            per, offsets = index["frame_events"], index["offsets"]
            if isinstance(per, int) and per > 0 and all(isinstance(o, int) for o in offsets):
                return per, offsets
    return 0, []


def _lines(path: Path, skip: int) -> Iterator[bytes]:
    """The archive's lines after the first ``skip``: from the frame holding line ``skip``,
    decompressed a chunk at a time; lines skipped inside it are counted in C (``bytes.count``),
    never split into objects."""
    try:
        raw = open(path, "rb")  # noqa: SIM115 (closed below, also when the caller stops early)
    except FileNotFoundError:
        # Removed after the caller's snapshot saw the job: the job is gone.
        raise NotFound(f"no job {path.name.removesuffix(SUFFIX)!r}", field="job_id") from None
    with raw:
        per, offsets = _frame_index(raw) if skip else (0, [])
        frame = min(skip // per, len(offsets) - 1) if offsets else 0
        raw.seek(offsets[frame] if offsets else 0)
        skip -= frame * per
        yield from _frame_lines(raw, skip, path)


def _frame_lines(raw: BinaryIO, skip: int, path: Path) -> Iterator[bytes]:
    decompressor = zstandard.ZstdDecompressor()
    with decompressor.stream_reader(raw, read_across_frames=True, closefd=False) as reader:
        tail = b""
        while True:
            chunk = reader.read(READ_CHUNK)
            if not chunk:
                break
            buf = tail + chunk
            if skip:
                newlines = buf.count(b"\n")
                if newlines <= skip:
                    skip -= newlines
                    tail = buf[buf.rfind(b"\n") + 1 :]
                    continue
                at = -1
                for _ in range(skip):
                    at = buf.index(b"\n", at + 1)
                buf, skip = buf[at + 1 :], 0
            lines = buf.split(b"\n")
            tail = lines.pop()
            yield from lines
        if tail or skip:
            raise ArchiveCorrupt(f"the stored log {path.name} ends early")


def read_events(
    data_dir: Path, job_id: str, after: int, limit: int | None, archived_seq: int
) -> list[Event]:
    """The archived events with ``seq > after`` (at most ``limit``; negative or None: all), as
    the registry's rows would give them; reads no further than it needs."""
    first = max(after, 0) + 1
    wanted = archived_seq - first + 1
    if limit is not None and limit >= 0:
        wanted = min(wanted, limit)
    out: list[Event] = []
    if wanted <= 0:
        return out
    for seq, line in enumerate(_lines(archive_path(data_dir, job_id), first - 1), start=first):
        event = Event.model_validate_json(line)
        if event.seq != seq:
            raise ArchiveCorrupt(f"the stored log of job {job_id} is out of order at seq {seq}")
        out.append(event)
        if len(out) == wanted:
            return out
    raise ArchiveCorrupt(f"the stored log of job {job_id} ends before seq {archived_seq}")


def last_log_lines(data_dir: Path, job_id: str, count: int, archived_seq: int) -> list[str]:
    """The last ``count`` log lines of the archive as the diary shows them, oldest first (one
    pass, bounded memory)."""
    kept: collections.deque[str] = collections.deque(maxlen=max(count, 0))
    if count <= 0 or archived_seq <= 0:
        return []
    for line in _lines(archive_path(data_dir, job_id), 0):
        event = json.loads(line)
        if event.get("kind") == "log":
            kept.append(diary_text(event))
    return list(kept)


# ---------------------------------------------------------------------- compacting


@dataclass
class Written:
    """An archive in place whose rows are not deleted yet (what a crash here leaves)."""

    job_id: str
    last_seq: int
    path: Path
    bytes: int


@dataclass
class RoundReport:
    jobs: int = 0
    events: int = 0
    archive_bytes: int = 0
    skipped: list[str] = field(default_factory=list)
    more: bool = False  # the round stopped at its bound with jobs still waiting


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_frames(out: BinaryIO, job_id: str, texts: Iterator[str]) -> None:
    """The events as frames of :data:`FRAME_EVENTS` lines, then the frame index (one frame's
    lines in memory at a time)."""
    compressor = zstandard.ZstdCompressor(level=COMPRESSION_LEVEL)
    offsets: list[int] = []
    lines: list[bytes] = []

    def flush() -> None:
        offsets.append(out.tell())
        out.write(compressor.compress(b"".join(lines)))
        lines.clear()

    for text in texts:
        data = text.encode()
        if b"\n" in data:
            raise ArchiveCorrupt(f"job {job_id} has an event with a raw newline")
        lines.append(data + b"\n")
        if len(lines) == FRAME_EVENTS:
            flush()
    if lines:
        flush()
    index = {"frame_events": FRAME_EVENTS, "offsets": offsets}
    index_json = json.dumps(index, separators=(",", ":")).encode()
    out.write(struct.pack("<II", SKIPPABLE_MAGIC, len(index_json) + 4) + index_json)
    out.write(struct.pack("<I", len(index_json)))


def write_archive(conn: sqlite3.Connection, data_dir: Path, job_id: str) -> Written | None:
    """Write a terminal, not yet compacted job's events to its archive (temporary name, fsync,
    rename, fsync of the folder); None when the job is not one to compact. Deletes nothing."""
    folder = private_dir(archive_dir(data_dir))
    final = archive_path(data_dir, job_id)
    conn.execute("BEGIN")  # one snapshot: the rows written are exactly those counted
    try:
        row = conn.execute(
            "SELECT status, last_seq, archived_seq FROM jobs WHERE id = ?", (job_id,)
        ).fetchone()
        if row is None or row[0] not in _TERMINAL or row[2] != 0 or row[1] <= 0:
            return None
        last_seq = int(row[1])
        count, low, high = conn.execute(
            "SELECT sum(span), min(seq), max(seq + span - 1) FROM events WHERE job_id = ?",
            (job_id,),
        ).fetchone()
        if (count, low, high) != (last_seq, 1, last_seq):
            # Line n is seq n: a log with gaps is left where it is.
            raise ArchiveCorrupt(f"job {job_id}'s events are not numbered 1..{last_seq}")
        tmp = folder / f".{job_id}.{os.getpid()}.{secrets.token_hex(4)}{TMP_SUFFIX}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
        try:
            with open(fd, "wb", closefd=True) as out:
                rows = conn.execute(
                    "SELECT seq, span, event FROM events WHERE job_id = ? ORDER BY seq", (job_id,)
                )
                texts = (text for row in rows for _, text in split_row(*row))
                _write_frames(out, job_id, texts)
                out.flush()
                os.fsync(out.fileno())
            size = tmp.stat().st_size
            os.replace(tmp, final)  # a leftover archive of this job is rewritten
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            raise
    finally:
        conn.execute("COMMIT")
    _fsync_dir(folder)
    return Written(job_id, last_seq, final, size)


def commit_archive(conn: sqlite3.Connection, data_dir: Path, written: Written) -> bool:
    """In one transaction, delete the archived rows and record ``archived_seq``; False when the
    job changed meanwhile (removed: its archive goes too; compacted by another process)."""

    with write(conn):
        row = conn.execute(
            "SELECT last_seq, archived_seq FROM jobs WHERE id = ?", (written.job_id,)
        ).fetchone()
        if row is not None and row[1] == 0 and row[0] == written.last_seq:
            conn.execute(
                "DELETE FROM events WHERE job_id = ? AND seq <= ?",
                (written.job_id, written.last_seq),
            )
            conn.execute(
                "UPDATE jobs SET archived_seq = ? WHERE id = ?", (written.last_seq, written.job_id)
            )
            return True
    if row is None:
        remove_archive(data_dir, written.job_id)
    return False


def compact_job(conn: sqlite3.Connection, data_dir: Path, job_id: str) -> Written | None:
    """Compact one job; what was written, or None when there was nothing to do."""
    written = write_archive(conn, data_dir, job_id)
    if written is None or not commit_archive(conn, data_dir, written):
        return None
    return written


def due_jobs(
    conn: sqlite3.Connection, older_than_s: float, limit: int, skip: set[str] | None = None
) -> list[str]:
    """Terminal, not yet compacted jobs finished at least ``older_than_s`` ago, oldest first."""
    marks = ",".join("?" * len(_TERMINAL))
    rows = conn.execute(
        f"SELECT id FROM jobs WHERE archived_seq = 0 AND updated_at <= ? "  # noqa: S608
        f"AND status IN ({marks}) AND last_seq > 0 "
        "AND id NOT IN (SELECT value FROM json_each(?)) ORDER BY updated_at LIMIT ?",
        (time.time() - older_than_s, *_TERMINAL, json.dumps(sorted(skip or ())), limit),
    ).fetchall()
    return [str(r[0]) for r in rows]


def sweep(conn: sqlite3.Connection, data_dir: Path) -> None:
    """Remove what crashed compactors and removals left: stale temporary files, and archives
    of jobs the registry no longer has."""
    folder = archive_dir(data_dir)
    if not folder.is_dir():
        return
    now = time.time()
    for path in folder.iterdir():
        name = path.name
        with contextlib.suppress(FileNotFoundError):
            if name.endswith(TMP_SUFFIX):
                if now - path.stat().st_mtime > TMP_STALE_S:
                    path.unlink()
            elif name.endswith(SUFFIX):
                job_id = name.removesuffix(SUFFIX)
                if conn.execute("SELECT 1 FROM jobs WHERE id = ?", (job_id,)).fetchone() is None:
                    path.unlink()


def compact_round(
    registry_path: Path,
    older_than_s: float,
    max_jobs: int,
    *,
    skip: set[str] | None = None,
    stop: threading.Event | None = None,
) -> RoundReport:
    """One bounded round (blocking: run it in a thread): at most ``max_jobs`` jobs."""

    data_dir = registry_path.parent
    report = RoundReport()
    conn = connect(registry_path)
    try:
        sweep(conn, data_dir)
        due = due_jobs(conn, older_than_s, max_jobs + 1, skip)
        report.more = len(due) > max_jobs
        for job_id in due[:max_jobs]:
            if stop is not None and stop.is_set():
                report.more = True
                break
            try:
                written = compact_job(conn, data_dir, job_id)
            except (ArchiveCorrupt, NotFound) as exc:
                log.warning("j2c: job %s's events stay in the registry: %s", job_id, exc)
                report.skipped.append(job_id)
                continue
            if written is not None:
                report.jobs += 1
                report.events += written.last_seq
                report.archive_bytes += written.bytes
    finally:
        conn.close()
    return report


class Compactor:
    """The server's periodic compaction: a round at start, then one every
    ``compact_every_minutes`` (sooner while a backlog remains)."""

    def __init__(self, events: EventLog, settings: RegistrySettings, logger: Any = None) -> None:
        self.events = events
        self.settings = settings
        self.log = logger or log
        self._stop = threading.Event()
        self._skip: set[str] = set()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.settings.compact_after_s() is None or self._task is not None:
            return  # the setting is off: nothing is ever compacted
        self._task = asyncio.get_running_loop().create_task(self._run(), name="j2c-compact")

    async def _run(self) -> None:
        older_than_s = self.settings.compact_after_s()
        assert older_than_s is not None
        while not self._stop.is_set():
            try:
                report = await asyncio.to_thread(
                    compact_round,
                    self.events.path,
                    older_than_s,
                    self.settings.compact_jobs_per_round,
                    skip=self._skip,
                    stop=self._stop,
                )
            except Exception:
                # A round that fails (a full disk) is tried again at the next period.
                self.log.exception("j2c: compacting finished jobs' events failed")
                report = RoundReport()
            self._skip.update(report.skipped)
            if report.jobs:
                self.log.info(
                    "j2c: compacted %d finished jobs (%d events, %d bytes stored)",
                    report.jobs,
                    report.events,
                    report.archive_bytes,
                )
            pause = BACKLOG_PAUSE_S if report.more else self.settings.compact_every_minutes * 60
            await asyncio.sleep(pause)

    async def stop(self) -> None:
        """End the task; a round in progress stops after its current job."""
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
