"""The event websocket under many viewers, through a real Jupyter server: bursts of events leave
in one socket write per loop step (j2c frames them itself), and every viewer, whatever its
``after``, gets each event once, in order, byte for byte what the registry holds."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

from j2c_server.jobs.journal import Journal
from j2c_server.jobs.service import JobService
from j2c_server.models import EventKind, JobRecord, JobRequest, JobStatus
from tests.support.jobs import follow

# Text sizes on both sides of the websocket frame's length encodings (7 bit, 16 bit, 64 bit).
SIZES = [0, 1, 125, 126, 127, 65535, 65536, 70000]


async def test_many_viewers_get_every_event_once_in_frames_of_every_size(
    jp_ws_fetch: Any, jp_serverapp: Any
) -> None:
    service: JobService = jp_serverapp.web_app.settings["j2c_service"]
    now = time.time()
    record = JobRecord(
        id="viewed",
        name="x",
        key="viewed",
        status=JobStatus.running,
        request=JobRequest(code_path="/p", call_path="/p/x.py"),
        scheduler="local",
        created_at=now,
        updated_at=now,
    )
    await service.registry.create_or_attach(record, {"kind": EventKind.status, "status": "running"})
    await service.registry.acquire_lease(record.id, "someone-else", 3600)  # nobody takes over
    journal = Journal(service.registry, service.bus, record.id)
    rng = random.Random(19)
    viewers: list[tuple[int, asyncio.Future[Any]]] = []
    last = 1
    for burst in range(20):
        texts = [("é" if burst % 2 else "x") * rng.choice(SIZES) for _ in range(rng.randint(1, 30))]
        drafts = [{"kind": EventKind.log, "text": text} for text in texts]
        last = (await journal.write(drafts)).last_seq
        for _ in range(2):
            after = rng.randint(0, last)
            viewers.append(
                (after, asyncio.ensure_future(follow(jp_ws_fetch, record.id, after=after)))
            )
        await asyncio.sleep(rng.choice([0, 0.01, 0.05]))
    await journal.write(
        [{"kind": EventKind.status, "status": JobStatus.succeeded}],
        change=lambda r: setattr(r, "status", JobStatus.succeeded),
    )
    stored = await service.events(record.id)
    for after, viewer in viewers:
        got = await asyncio.wait_for(viewer, 60)
        assert got == stored[after:], f"after={after}"
    assert len(stored) > 100 and any(len(e.text or "") > 65536 for e in stored)
