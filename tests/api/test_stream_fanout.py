"""The event websocket under many viewers, through a real Jupyter server: bursts of events leave
in one socket write per loop step (j2c frames them itself), and every viewer, whatever its
``after``, gets each event once, in order, byte for byte what the registry holds."""

from __future__ import annotations

import asyncio
import base64
import os
import random
import socket
import struct
import time
from typing import Any

from j2c_server.jobs.journal import Journal
from j2c_server.jobs.service import JobService
from j2c_server.models import EventKind, JobRecord, JobRequest, JobStatus
from tests.support.jobs import follow

# Text sizes on both sides of the websocket frame's length encodings (7 bit, 16 bit, 64 bit).
SIZES = [0, 1, 125, 126, 127, 65535, 65536, 70000]


async def _running_job(service: JobService, job_id: str) -> tuple[JobRecord, Journal]:
    """A running job that nobody takes over (another owner's lease), and its writer."""
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
    await service.registry.create_or_attach(record, {"kind": EventKind.status, "status": "running"})
    await service.registry.acquire_lease(record.id, "someone-else", 3600)
    return record, Journal(service.registry, service.bus, record.id)


async def test_many_viewers_get_every_event_once_in_frames_of_every_size(
    jp_ws_fetch: Any, jp_serverapp: Any
) -> None:
    service: JobService = jp_serverapp.web_app.settings["j2c_service"]
    record, journal = await _running_job(service, "viewed")
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


async def _read_frames(
    reader: asyncio.StreamReader, most: int | None = None
) -> tuple[int, int | None]:
    """(text frames, close code) until the server's close frame, the connection's end or
    ``most`` text frames."""
    texts = 0
    while most is None or texts < most:
        try:
            head = await reader.readexactly(2)
            size = head[1] & 0x7F
            if size == 126:
                size = struct.unpack("!H", await reader.readexactly(2))[0]
            elif size == 127:
                size = struct.unpack("!Q", await reader.readexactly(8))[0]
            payload = await reader.readexactly(size)
        except asyncio.IncompleteReadError:
            return texts, None  # the connection ended without a close frame
        if head[0] & 0x0F == 0x8:
            return texts, struct.unpack("!H", payload[:2])[0]
        texts += 1
    return texts, None


async def test_a_reader_slower_than_the_close_timeout_still_gets_every_event(
    jp_serverapp: Any,
    http_server_client: Any,
    jp_http_port: int,
    jp_base_url: str,
    jp_auth_header: dict[str, str],
) -> None:
    """A viewer that reads nothing for longer than tornado's 5 s close timeout while the job's
    last megabytes of events and its end are sent: it gets every event, then the close frame.
    (The handler used to close right after queueing the last frames; tornado then dropped the
    connection with the frames still queued: the last events lost, no close frame.)"""
    service: JobService = jp_serverapp.web_app.settings["j2c_service"]
    record, journal = await _running_job(service, "slow-reader")

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the kernel holds little
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", jp_http_port))
    reader, writer = await asyncio.open_connection(sock=sock, limit=1 << 20)
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write(
        (
            f"GET {jp_base_url}j2c/api/jobs/{record.id}/stream?after=0 HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{jp_http_port}\r\n"
            f"Authorization: {jp_auth_header['Authorization']}\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    await writer.drain()
    answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    assert answer.startswith(b"HTTP/1.1 101"), answer
    try:
        await journal.write([{"kind": EventKind.log, "text": f"line {i}"} for i in range(5)])
        texts, code = await asyncio.wait_for(_read_frames(reader, 6), 30)
        assert (texts, code) == (6, None)
        # Then the job's last 16 MB (4x what the kernel buffers) and its end in one write,
        # while the viewer reads nothing.
        big: list[Any] = [{"kind": EventKind.log, "text": "x" * 1_600_000} for _ in range(10)]
        await journal.write(
            [*big, {"kind": EventKind.status, "status": JobStatus.succeeded}],
            change=lambda r: setattr(r, "status", JobStatus.succeeded),
        )
        await asyncio.sleep(7)  # past tornado's 5 s wait for the client's close answer
        texts, code = await asyncio.wait_for(_read_frames(reader), 60)
    finally:
        writer.close()
    assert (texts, code) == (10 + 1, 1000)
