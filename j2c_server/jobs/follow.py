"""Following jobs: a job's events replayed from any ``seq`` then pushed live, waiting for its
end, and watching it here until it ends (in this process or a detached watcher).

Live events reach followers through one feed per job (:class:`~.fanout.Fanout`): pushed by
this process's writes and by one shared poll of the registry for other processes'.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from j2c_server.config import J2CSettings
from j2c_server.core.errors import J2CError
from j2c_server.core.file_modes import private_dir, private_opener
from j2c_server.jobs.drive.drivers import Drivers
from j2c_server.jobs.fanout import Fanout, FanoutClosed
from j2c_server.registry.job_registry import Registry
from j2c_server.usage import metrics
from j2c_server.wire.api import Event, JobRecord
from j2c_server.wire.event_frames import WireEvent

WATCH_RETRY_S = 1.0


class ServiceStopping(J2CError):
    """The service stopped while a client followed a job (the job itself goes on)."""

    status_code = 503
    code = "stopping"


class Following:
    """Event streams, waiting for a job's end, and watching a job to its end."""

    def __init__(
        self, settings: J2CSettings, registry: Registry, fanout: Fanout, drivers: Drivers
    ) -> None:
        self.settings = settings
        self.registry = registry
        self.fanout = fanout
        self.drivers = drivers
        self.stopping = False

    async def stream(self, job_id: str, after: int = 0) -> AsyncIterator[Event]:
        """The job's events after ``after``, then live ones as they are persisted; ends after
        the terminal status event. Pushed by this process's writes and by one shared poll for
        other processes' (:class:`~.eventbus.Fanout`); a follower of a job nobody drives
        takes it over."""
        async for batch in self.stream_wire(job_id, after):
            for wire in batch:
                yield wire.to_event()

    async def stream_wire(self, job_id: str, after: int = 0) -> AsyncIterator[list[WireEvent]]:
        """:meth:`stream` in batches (what arrived together), each event with its JSON bytes
        (made once for all followers): what the websocket sends."""
        if self.stopping:
            raise ServiceStopping("j2c is shutting down; reconnect with your last seq")
        metrics.follower_joined()
        try:
            async for batch in self.fanout.follow_batches(job_id, after):
                yield batch
        except FanoutClosed:
            raise ServiceStopping("j2c is shutting down; reconnect with your last seq") from None
        finally:
            metrics.follower_left()

    async def wait(self, job_id: str) -> JobRecord:
        """Wait for the job to end; returns its final record."""
        record = await self.registry.jobs.get(job_id)
        if not record.status.terminal:
            async for _ in self.stream(job_id, after=record.last_seq):
                pass
        return await self.registry.jobs.get(job_id)

    async def watch(self, job_id: str) -> JobRecord:
        """Drive the job in this process whenever no other process does, until it ends (what
        a detached watcher runs)."""
        while True:
            record = await self.registry.jobs.get(job_id)
            if record.status.terminal:
                return record
            self.drivers.drive(job_id)
            driver = self.drivers.get(job_id)
            if driver is not None and driver.task is not None:
                await asyncio.wait({driver.task})
            if (await self.registry.leases.owner(job_id)) is not None:
                await asyncio.sleep(WATCH_RETRY_S)

    def run_detached_watcher(self, job_id: str, *, notify_fd: int | None = None) -> int:
        """Start ``python -m j2c_server.cli.watcher <job_id>`` in its own
        session, so the job keeps being watched after this process (a CLI, a kernel) exits;
        returns its PID. It
        takes the lease as soon as it is free, watches to the end and exits; given ``notify_fd``
        (a terminal, inherited), it writes the job's end line there."""
        notify = [] if notify_fd is None else ["--notify-fd", str(notify_fd)]
        logs = self.settings.data_path() / "watchers"
        private_dir(logs)
        settings = self.settings.model_copy(update={"data_dir": str(self.settings.data_path())})
        with open(logs / f"{job_id}.log", "ab", opener=private_opener) as log_file:
            process = subprocess.Popen(
                [sys.executable, "-m", "j2c_server.cli.watcher", job_id, *notify],
                stdin=subprocess.PIPE,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=Path.home(),
                env=os.environ.copy(),
                pass_fds=() if notify_fd is None else (notify_fd,),
            )
        assert process.stdin is not None
        # Settings travel on stdin: never on a command line other users can read.
        process.stdin.write(settings.model_dump_json().encode())
        process.stdin.close()
        return process.pid
