"""One job sent through a real :class:`JobService` (no server) and waited for: what the
backend tests use to run a project end to end on their engine."""

from __future__ import annotations

import asyncio

from j2c_server.config import J2CSettings
from j2c_server.jobs.service import JobService
from j2c_server.wire.api import JobRecord, JobRequest


async def run_job(
    settings: J2CSettings, request: JobRequest, timeout_s: float = 120
) -> tuple[JobRecord, list[str]]:
    """The job's final record and its log lines, once it has ended."""
    service = JobService(settings)
    service.start()
    try:
        record = await service.submit(request)
        async with asyncio.timeout(timeout_s):
            final = await service.wait(record.id)
        events = await service.events(record.id)
    finally:
        await service.stop()
    return final, [e.text or "" for e in events if e.kind.value == "log"]
