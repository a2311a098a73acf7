"""How the CLI and the magic reach the job service, and find a job by a prefix of its id."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from j2c_server.config import J2CSettings
from j2c_server.core.errors import InvalidInput, NotFound
from j2c_server.wire.api import Event, JobRecord

if TYPE_CHECKING:
    from j2c_server.jobs.service import JobService

log = logging.getLogger("j2c")
DETACH_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@asynccontextmanager
async def open_service(settings: J2CSettings) -> AsyncIterator[JobService]:
    """A service for one command. It is not ``start()``-ed: adopting every orphaned job is for
    long-lived processes (the server, detached watchers); a command drives only the job it
    submits, or one it follows that nobody else drives."""
    from j2c_server.sweeps.hook import job_service

    service = job_service(settings, log=log, frontend="cli")
    try:
        yield service
    finally:
        await service.stop()


async def resolve_job(service: JobService, ref: str) -> JobRecord:
    """The job whose id is ``ref`` or, like git, the only one whose id starts with it (a
    sweep's, when the others are its variants)."""
    ref = ref.strip()
    if not ref:
        raise InvalidInput("a job id is required", field="job")
    matches = [record for record in await service.list_jobs() if record.id.startswith(ref)]
    exact = [record for record in matches if record.id == ref]
    if exact:
        return exact[0]
    if not matches:
        raise NotFound(
            f"no job with id {ref!r}", field="job", hint="`j2c list` or `%j2c list` shows them"
        )
    if len(matches) > 1:
        # A sweep's id is a prefix of its variants' (``<sweep>-<i>``): it names the sweep.
        heads = [record for record in matches if record.sweep is None or not record.sweep.parent]
        if len(heads) == 1 and _variants_of(heads[0], matches):
            return heads[0]
        ids = ", ".join(sorted(record.id for record in matches)[:5])
        raise InvalidInput(f"job id prefix {ref!r} is ambiguous: {ids}", field="job")
    return matches[0]


def _variants_of(parent: JobRecord, records: list[JobRecord]) -> bool:
    """Whether every record but ``parent`` is one of its sweep's variants."""
    return all(
        record is parent or (record.sweep is not None and record.sweep.parent == parent.id)
        for record in records
    )


@contextlib.contextmanager
def detach_signals() -> Iterator[asyncio.Event]:
    """An event set by Ctrl-C, SIGTERM or SIGHUP: the user leaves, the job goes on."""
    loop = asyncio.get_running_loop()
    detach = asyncio.Event()
    for signum in DETACH_SIGNALS:
        loop.add_signal_handler(signum, detach.set)
    try:
        yield detach
    finally:
        for signum in DETACH_SIGNALS:
            loop.remove_signal_handler(signum)


async def follow_until(
    service: JobService,
    job_id: str,
    on_event: Callable[[Event], None],
    detach: asyncio.Event,
    *,
    after: int = 0,
    notify_fd: int | None = None,
) -> bool:
    """Feed the job's events to ``on_event`` until it ends (True) or ``detach`` is set (False).

    On a detach the job is handed to a detached watcher before this process lets go of it (given
    ``notify_fd``, the terminal it tells when the job ends).
    """

    async def follow() -> None:
        async for event in service.stream(job_id, after):
            on_event(event)

    follower = asyncio.ensure_future(follow())
    detacher = asyncio.ensure_future(detach.wait())
    await asyncio.wait({follower, detacher}, return_when=asyncio.FIRST_COMPLETED)
    detacher.cancel()
    if follower.done():
        follower.result()
        return True
    follower.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await follower
    service.run_detached_watcher(job_id, notify_fd=notify_fd)
    return False
