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
from j2c_server.wire.api import EventKind, JobRecord, JobRequest, JobStatus
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
    await service.registry.jobs.create_or_attach(
        record, {"kind": EventKind.status, "status": "running"}
    )
    await service.registry.leases.acquire(record.id, "someone-else", 3600)
    return record, Journal(service.registry, service.bus, record.id)


async def test_many_viewers_get_every_event_once_in_frames_of_every_size(
    jp_ws_fetch: Any, jp_serverapp: Any
) -> None:
    # Keep-alive pings interleaved with the events, as in a long session (Jupyter's are 30 s
    # apart): a viewer's pongs must never cost it the end of the log (see the stalled viewer).
    jp_serverapp.web_app.settings["ws_ping_interval"] = 200
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


async def _raw_viewer(
    port: int,
    base_url: str,
    auth: dict[str, str],
    job_id: str,
    *,
    rcvbuf: int | None = None,
    buffered: int = 1 << 20,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A websocket client of our own on a plain socket, past the upgrade: what it reads, and
    when, is up to the test. Its kernel receive buffer is set when given; asyncio reads ahead
    of the test into at most about 2x ``buffered`` bytes."""
    sock = socket.socket()
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=sock, limit=buffered)
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write(
        (
            f"GET {base_url}j2c/api/jobs/{job_id}/stream?after=0 HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{port}\r\n"
            f"Authorization: {auth['Authorization']}\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    await writer.drain()
    answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    assert answer.startswith(b"HTTP/1.1 101"), answer
    return reader, writer


def _pong(payload: bytes) -> bytes:
    """A client's pong frame (masked, as a client's frames must be: RFC 6455 5.3)."""
    mask = os.urandom(4)
    body = bytes(byte ^ mask[index % 4] for index, byte in enumerate(payload))
    return bytes([0x8A, 0x80 | len(payload)]) + mask + body


async def _read_frames(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, most: int | None = None
) -> tuple[int, int | None]:
    """(text frames, close code) until the server's close frame, the connection's end or
    ``most`` text frames; every ping is answered, as a browser does."""
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
        except (asyncio.IncompleteReadError, ConnectionResetError):
            return texts, None  # the connection ended without a close frame
        opcode = head[0] & 0x0F
        if opcode == 0x8:
            return texts, struct.unpack("!H", payload[:2])[0]
        if opcode == 0x9:
            writer.write(_pong(payload))
            continue
        texts += 1
    return texts, None


async def test_a_reader_slower_than_the_close_timeout_still_gets_every_event(
    jp_serverapp: Any,
    http_server_client: Any,  # the server listening
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
    reader, writer = await _raw_viewer(
        jp_http_port,
        jp_base_url,
        jp_auth_header,
        record.id,
        rcvbuf=4096,  # the kernel holds little
    )
    try:
        await journal.write([{"kind": EventKind.log, "text": f"line {i}"} for i in range(5)])
        texts, code = await asyncio.wait_for(_read_frames(reader, writer, 6), 30)
        assert (texts, code) == (6, None)
        # Then the job's last 16 MB (4x what the kernel buffers) and its end in one write,
        # while the viewer reads nothing.
        big: list[Any] = [{"kind": EventKind.log, "text": "x" * 1_600_000} for _ in range(10)]
        await journal.write(
            [*big, {"kind": EventKind.status, "status": JobStatus.succeeded}],
            change=lambda r: setattr(r, "status", JobStatus.succeeded),
        )
        await asyncio.sleep(7)  # past tornado's 5 s wait for the client's close answer
        texts, code = await asyncio.wait_for(_read_frames(reader, writer), 60)
    finally:
        writer.close()
    assert (texts, code) == (10 + 1, 1000)


async def test_a_stalled_viewer_answering_pings_gets_every_event_then_the_close(
    jp_serverapp: Any,
    http_server_client: Any,  # the server listening
    jp_http_port: int,
    jp_base_url: str,
    jp_auth_header: dict[str, str],
) -> None:
    """The early close under load, made deterministic: a viewer (a loaded client) stalls past
    tornado's 5 s close timeout while the job's last megabyte sits in the kernel's socket
    buffers, then reads on and answers the keep-alive pings queued before it, as every client
    does. It gets every event, then the close frame 1000.

    (The handler used to close once the last frames were in the kernel's buffer, not at the
    client; tornado dropped the connection 5 s later; the viewer's next pong then reached a
    closed socket, whose kernel answered with a reset and discarded the bytes it still held:
    the last events lost and no close frame on either side.)"""
    jp_serverapp.web_app.settings["ws_ping_interval"] = 100  # Jupyter's keep-alive ping, ms
    service: JobService = jp_serverapp.web_app.settings["j2c_service"]
    record, journal = await _running_job(service, "stalled")
    # A stall is a stall at the socket: asyncio reads ahead of the test only 2x 16 KiB.
    reader, writer = await _raw_viewer(
        jp_http_port, jp_base_url, jp_auth_header, record.id, buffered=1 << 14
    )
    try:
        await journal.write([{"kind": EventKind.log, "text": f"line {i}"} for i in range(5)])
        texts, code = await asyncio.wait_for(_read_frames(reader, writer, 6), 30)
        assert (texts, code) == (6, None)
        await asyncio.sleep(0.5)  # pings queue up while the viewer reads nothing
        tail: list[Any] = [{"kind": EventKind.log, "text": "y" * 100_000} for _ in range(10)]
        await journal.write(
            [*tail, {"kind": EventKind.status, "status": JobStatus.succeeded}],
            change=lambda r: setattr(r, "status", JobStatus.succeeded),
        )
        await asyncio.sleep(6.5)  # the stall: past tornado's 5 s close timeout
        texts, code = await asyncio.wait_for(_read_frames(reader, writer), 60)
    finally:
        writer.close()
    assert (texts, code) == (10 + 1, 1000)
