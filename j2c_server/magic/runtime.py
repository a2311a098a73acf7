"""What a kernel holds while ``%j2c`` jobs run: the job service on a thread of its own, the
``Job`` handle a cell returns, and the cell's live view of a job's events.

A kernel's event loop is busy running the cell, so the service runs its own loop on a daemon
thread (one per settings, closed at exit) and cells reach it through
``asyncio.run_coroutine_threadsafe``. Watching a job redraws the cell's output at most every
:data:`UPDATE_INTERVAL_S`; interrupting the cell detaches from the job, which keeps running.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import queue
import sys
import threading
import time
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, TypeVar

from j2c_server.cli.commands import detached_message
from j2c_server.cli.render import StageBoard, exit_code_of, log_text, scan_notes
from j2c_server.cli.session import log
from j2c_server.cli.summary import end_lines, progress_text, sent_line, shown_by_default
from j2c_server.config import J2CSettings
from j2c_server.core.errors import J2CError
from j2c_server.jobs.end_notice import end_line
from j2c_server.wire.api import (
    Event,
    EventKind,
    JobRecord,
    JobResults,
    JobStatus,
    LineLevel,
    Stage,
    StageState,
)

if TYPE_CHECKING:
    from j2c_server.jobs.service import JobService

T = TypeVar("T")
UPDATE_INTERVAL_S = 0.1
_POLL_S = 0.2


# --------------------------------------------------------------------------- the service thread


class BackgroundService:
    """One :class:`JobService` on its own thread and event loop, shared by the kernel's cells."""

    def __init__(self, settings: J2CSettings) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="j2c-service", daemon=True
        )
        self._thread.start()
        self.service: JobService = self.call(self._open(settings))
        # Jobs this kernel submitted or followed and did not see end: handed off at exit.
        self.jobs: set[str] = set()

    @staticmethod
    async def _open(settings: J2CSettings) -> JobService:
        # Made on the service's own loop. Not start()-ed: the kernel drives the jobs it submits
        # or follows; adopting everyone's orphaned jobs is the server's and watchers' work.
        from j2c_server.sweeps.hook import job_service

        return job_service(settings, log=log, frontend="magic")

    def spawn(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.spawn(coro).result()

    def close(self) -> None:
        """Hand the jobs this kernel may still drive to detached watchers, then stop.

        Runs at interpreter exit, when thread pools (the registry's included) take no more
        work: nothing here may read the registry. A watcher given a finished job just exits;
        one given a job whose lease this process could not release takes over when it expires.
        """
        for job_id in sorted(self.jobs):
            self.service.run_detached_watcher(job_id)
        with contextlib.suppress(RuntimeError):  # "cannot schedule new futures after shutdown"
            self.call(self.service.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)


_services: dict[str, BackgroundService] = {}
_services_lock = threading.Lock()


def background_service(settings: J2CSettings) -> BackgroundService:
    """The kernel's service for these settings, started on first use."""
    key = settings.model_dump_json()
    with _services_lock:
        if key not in _services:
            _services[key] = BackgroundService(settings)
        return _services[key]


@atexit.register
def _close_services() -> None:
    with _services_lock:
        while _services:
            _services.popitem()[1].close()


# --------------------------------------------------------------------------- the job handle


class Job:
    """A j2c job seen from the notebook: ``status``, ``logs()``, ``wait()``, ``cancel()``,
    ``results()``."""

    def __init__(self, runner: BackgroundService, job_id: str) -> None:
        self._runner = runner
        self.id = job_id

    def record(self) -> JobRecord:
        return self._runner.call(self._runner.service.get(self.id))

    @property
    def status(self) -> JobStatus:
        return self.record().status

    def logs(self, after: int = 0, *, verbose: bool = False) -> str:
        """Everything the job printed so far (stdout and stderr, in order); ``verbose``: with
        j2c's diary of it (``j2c: <phase>: ...`` lines)."""
        events = self._runner.call(self._runner.service.events(self.id, after))
        return "\n".join(
            log_text(e)
            for e in events
            if e.kind == EventKind.log and (verbose or not e.is_j2c_line)
        )

    def wait(self, *, quiet: bool = False, verbose: bool = False) -> JobRecord:
        """Follow the job in this cell's output until it ends; an interrupt detaches."""
        watch(self._runner, self.id, quiet=quiet, verbose=verbose)
        return self.record()

    def cancel(self) -> JobRecord:
        return self._runner.call(self._runner.service.cancel(self.id))

    def results(self) -> JobResults | None:
        return self.record().results

    @property
    def exit_code(self) -> int:
        return exit_code_of(self.record())

    def __repr__(self) -> str:
        record = self.record()
        code = f", exit_code={record.exit_code}" if record.exit_code is not None else ""
        attempt = f", {words}" if (words := record.attempt_words()) else ""
        return f"<j2c Job {record.id} {record.status.value}{attempt}{code}>"


# --------------------------------------------------------------------------- live output


class CellView:
    """A job in a cell's output: one display updated in place at the top (the job's progress;
    once it ended, how: a failed job's reason, what to do and its line first), then the job's
    lines as prints, its output on stdout (its stderr's on stderr where the engine tells them
    apart). j2c's own: its warnings and hints on stdout, its errors on stderr, the rest of its
    diary only with ``verbose`` (on stdout, with the stage board in the display). Nothing of
    j2c's goes to stderr for a job that is fine."""

    def __init__(self, job_id: str, name: str | None = None, *, verbose: bool = False) -> None:
        self.job_id = job_id
        self.name = name
        self.verbose = verbose
        self.board = StageBoard()
        self.phase: str | None = None  # j2c's latest phase in the job (downloading, ...)
        self.sent: str | None = None
        self.ending: list[str] = []
        self.output_uri: str | None = None
        self._handle: Any = None
        self._last_update = 0.0

    def handle(self, event: Event) -> None:
        self.board.apply(event)
        if event.kind == EventKind.log:
            self._line(event)
        elif event.kind == EventKind.error:
            print(f"j2c: error: {event.text}", file=sys.stderr, flush=True)
        elif event.kind == EventKind.stage:
            for line in scan_notes(event):
                print(f"j2c: {line}", flush=True)
            if event.stage == Stage.submit and event.state in (
                StageState.finished,
                StageState.reused,
            ):
                self.sent = sent_line(self.job_id, self.board)
            self.update(force=True)
        elif event.kind == EventKind.status:
            if event.terminal:
                self.ending = end_lines(self.job_id, event, output_uri=self.output_uri)
            self.update(force=True)
        elif event.kind == EventKind.progress:
            self.update(force=False)
        elif event.kind == EventKind.result and event.data.get("output_uri"):
            self.output_uri = str(event.data["output_uri"])

    def _line(self, event: Event) -> None:
        if not event.is_j2c_line:
            stream = sys.stderr if event.stream == "stderr" else sys.stdout
            print(log_text(event), file=stream, flush=True)
        elif event.level == LineLevel.error:
            print(log_text(event), file=sys.stderr, flush=True)
        elif self.verbose or shown_by_default(event):
            print(log_text(event), flush=True)
        else:
            self.phase = event.phase
            self.update(force=False)

    def lines(self) -> list[str]:
        """What the display shows now."""
        name = f" ({self.name})" if self.name else ""
        board = self.board.lines() if self.verbose else []
        sent = [self.sent] if self.sent else []
        if self.ending:
            if self.board.status == JobStatus.failed:
                return [*self.ending, *sent, *board]  # why it failed, first
            return [*sent, *self.ending, *board]
        now = f"j2c: job {self.job_id}{name} {progress_text(self.board, self.phase)}"
        return [*sent, now, *board]

    def update(self, *, force: bool) -> None:
        now = time.monotonic()
        if not force and now - self._last_update < UPDATE_INTERVAL_S:
            return
        self._last_update = now
        from IPython.display import display

        data = {"text/plain": "\n".join(self.lines())}
        if self._handle is None:
            self._handle = display(data, raw=True, display_id=True)  # type: ignore[no-untyped-call]
        else:
            self._handle.update(data, raw=True)


def announce_end(runner: BackgroundService, record: JobRecord) -> None:
    """One status line in this cell's output that says how the job ended, once it does.

    The line is a display handle made here (its message's parent is this cell) and updated from
    the service's thread: the kernel stays free for other cells, and the notebook puts the
    update in this cell by its display id. A kernel that stops first leaves the line as it was.
    """
    from IPython.display import display

    waiting = (
        f"j2c: job {record.id} ({record.name}) {record.status.value}; this line says how it ends"
    )
    handle: Any = display({"text/plain": waiting}, raw=True, display_id=True)  # type: ignore[no-untyped-call]

    async def tell() -> None:
        try:
            ended = await runner.service.wait(record.id)
        except J2CError as exc:
            handle.update(
                {"text/plain": f"j2c: job {record.id}: not followed to its end: {exc}"}, raw=True
            )
            return
        handle.update({"text/plain": end_line(ended)}, raw=True)

    runner.spawn(tell())


def watch(
    runner: BackgroundService,
    job_id: str,
    *,
    after: int = 0,
    quiet: bool = False,
    verbose: bool = False,
    name: str | None = None,
) -> bool:
    """Render the job's events until it ends (True) or the user interrupts (False)."""
    events: queue.Queue[Event | None] = queue.Queue()

    async def pump() -> None:
        try:
            async for event in runner.service.stream(job_id, after):
                events.put(event)
        finally:
            events.put(None)

    runner.jobs.add(job_id)
    pumping = runner.spawn(pump())
    view = CellView(job_id, name, verbose=verbose)
    try:
        while True:
            try:
                event = events.get(timeout=_POLL_S)
            except queue.Empty:
                continue
            if event is None:
                pumping.result()  # re-raises what ended the stream early
                runner.jobs.discard(job_id)  # over: nothing to hand off at exit
                return True
            if not quiet or event.kind != EventKind.log:
                view.handle(event)
    except KeyboardInterrupt:
        # Only the cell stops following: the job goes on, driven by this kernel's service.
        pumping.cancel()
        message = detached_message(
            job_id, max(after, view.board.last_seq), prog="%j2c", handle="job.wait()"
        )
        print(message)  # the job is fine: it goes on
        return False
    finally:
        view.update(force=True)
