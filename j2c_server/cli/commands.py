"""The job commands of ``j2c`` and ``%j2c``: status, logs, cancel, list, and what they print.

Each command is one async function over a :class:`JobService` (what it does) and one renderer
(what it prints, to the :class:`Streams` it is given). The CLI (``jobs.py``) and the magic parse
with the same click commands and call the same two functions; they differ only in the service
they pass (one per command, or the kernel's) and who records the end of a job they let go of.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

from j2c_server.cli.output import json_text
from j2c_server.cli.render import stage_line
from j2c_server.cli.session import resolve_job
from j2c_server.cli.summary import failure_lines
from j2c_server.cli.terminal import TerminalRenderer
from j2c_server.jobs.results import describe_results
from j2c_server.wire.api import Event, EventKind, JobRecord

if TYPE_CHECKING:
    from j2c_server.jobs.service import JobService

# The events ``logs`` prints as text: the job's output, its status changes, its errors and
# where its outputs went.
LOG_KINDS = frozenset({EventKind.log, EventKind.status, EventKind.error, EventKind.result})


@dataclass(frozen=True)
class Streams:
    """Where a command writes: results on ``out``, j2c's own messages on ``err``."""

    out: TextIO
    err: TextIO

    @classmethod
    def std(cls) -> Streams:
        # Looked up at each call: a kernel swaps sys.stdout/sys.stderr for every cell.
        return cls(sys.stdout, sys.stderr)

    def print(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def say(self, text: str) -> None:
        self.err.write(text + "\n")
        self.err.flush()


# --------------------------------------------------------------------------- status


async def status(service: JobService, ref: str) -> JobRecord:
    return await resolve_job(service, ref)


def render_status(record: JobRecord, *, as_json: bool, streams: Streams) -> None:
    streams.print(json_text(record) if as_json else describe(record))


def describe(record: JobRecord) -> str:
    lines = [
        f"job        {record.id}",
        f"name       {record.name}",
        f"status     {record.status.value}" + (f" ({record.message})" if record.message else ""),
        f"scheduler  {record.scheduler}",
        f"created    {_clock(record.created_at)}",
    ]
    if record.exit_code is not None:
        lines.append(f"exit code  {record.exit_code}")
    lines.extend(attempt_lines(record))
    if record.failure is not None:
        lines.append(f"failure    {record.failure.reason}")
        if record.failure.action:
            lines.append(f"           what to do: {record.failure.action}")
    for name, stage in record.stages.items():
        lines.append("  " + stage_line(name, stage.state.value, stage.seconds, stage.reason))
    lines.extend(describe_results(record.results))
    return "\n".join(lines)


def attempt_lines(record: JobRecord) -> list[str]:
    """``attempt    2 of 4``, then each attempt: how it ended, or where it resumed from; none
    for a job that ran once."""
    words = record.attempt_words()
    if words is None:
        return []
    lines = [f"attempt    {words.removeprefix('attempt ')}"]
    for attempt in record.attempts:
        how = attempt.status.value if attempt.status is not None else "running"
        parts = [f"  {attempt.number}  {how:<10}"]
        if attempt.resumed_from:
            parts.append(f"resumed from {attempt.resumed_from}")
            if attempt.resumed_saved_at:
                parts.append(f"saved {_clock(attempt.resumed_saved_at)}")
        elif attempt.number > 1:
            parts.append("started from scratch")
        if attempt.interrupted and attempt.reason:
            node = f" on node {attempt.node}" if attempt.node else ""
            ended = f" at {_clock(attempt.ended_at)}" if attempt.ended_at else ""
            parts.append(f"ended: {attempt.reason}{node}{ended}")
        lines.append("  ".join(parts).rstrip())
    return lines


# --------------------------------------------------------------------------- logs


async def logs(service: JobService, ref: str, *, after: int) -> tuple[JobRecord, list[Event]]:
    """The job and its events after number ``after`` (what ``logs`` without ``-f`` prints)."""
    record = await resolve_job(service, ref)
    return record, await service.events(record.id, after)


class LogPrinter:
    """``logs``' renderer: each event as a JSON line, or the job's output, status and errors
    as the terminal's plain lines (``verbose``: j2c's whole diary). A failed job's reason comes
    first when the job had ended already (:meth:`top`). ``last_seq`` is where a re-attach
    continues."""

    def __init__(
        self,
        job_id: str,
        *,
        as_json: bool,
        streams: Streams,
        after: int = 0,
        verbose: bool = False,
    ) -> None:
        self.job_id = job_id
        self.as_json = as_json
        self.streams = streams
        self.last_seq = after
        self._text = TerminalRenderer(
            job_id, tty=False, out=streams.out, err=streams.err, verbose=verbose
        )

    def top(self, record: JobRecord) -> None:
        """A failed job's reason, what to do and its line, before its log."""
        if self.as_json or record.failure is None or not record.status.terminal:
            return
        for line in failure_lines(record.id, record.failure, record.exit_code):
            self.streams.say(line)
        self._text.failure_told = True

    def handle(self, event: Event) -> None:
        self.last_seq = event.seq
        if self.as_json:
            self.streams.print(event.model_dump_json())
        elif event.kind in LOG_KINDS:
            self._text.handle(event)

    def handle_all(self, events: Iterable[Event]) -> None:
        for event in events:
            self.handle(event)


def detached_message(job_id: str, last_seq: int, *, prog: str = "j2c", handle: str = "") -> str:
    """What a front end says when it stops following a job that goes on; ``handle`` is another
    way to re-attach (the magic's ``job.wait()``)."""
    also = f"`{handle}` or " if handle else ""
    return (
        f"j2c: detached; job {job_id} keeps running. "
        f"Re-attach: {also}`{prog} logs -f {job_id} --after {last_seq}`; "
        f"cancel: `{prog} cancel {job_id}`"
    )


# --------------------------------------------------------------------------- cancel


async def cancel(service: JobService, ref: str, *, hand_off: Callable[[str], object]) -> JobRecord:
    """Ask the job to stop. While it is not over, ``hand_off`` gets its id: someone must record
    how it ends after the caller lets go (a detached watcher, or the kernel at exit)."""
    record = await service.cancel((await resolve_job(service, ref)).id)
    if not record.status.terminal:
        hand_off(record.id)
    return record


def render_cancelled(record: JobRecord, *, as_json: bool, streams: Streams) -> None:
    if as_json:
        streams.print(json_text(record))
    else:
        streams.say(f"j2c: job {record.id} {record.status.value}")


async def remove(service: JobService, ref: str) -> str:
    """Forget a finished job (its record and events), as the Compute panel's Remove does; a job
    still going is refused (cancel it first). Its outputs in the store stay (``j2c gc``)."""
    record = await resolve_job(service, ref)
    await service.remove(record.id)
    return record.id


# --------------------------------------------------------------------------- list


async def list_jobs(service: JobService) -> list[JobRecord]:
    """Every job of the shared registry, newest first."""
    return newest_first(await service.list_jobs())


def render_list(records: list[JobRecord], *, as_json: bool, streams: Streams) -> None:
    streams.print(json_text(records) if as_json else table(records))


def newest_first(records: list[JobRecord]) -> list[JobRecord]:
    return sorted(records, key=lambda record: record.created_at, reverse=True)


def table(records: list[JobRecord]) -> str:
    width = max([len(record.id) for record in records] + [2]) + 2
    lines = [f"{'ID':<{width}}{'STATUS':<12}{'EXIT':<6}{'CREATED':<21}NAME"]
    for record in newest_first(records):
        exit_code = "" if record.exit_code is None else str(record.exit_code)
        lines.append(
            f"{record.id:<{width}}{record.status.value:<12}{exit_code:<6}"
            f"{_clock(record.created_at):<21}{record.name}"
        )
    return "\n".join(lines)


def _clock(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))
