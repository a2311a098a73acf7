"""A lean websocket reader for the scale benchmark's viewers (client side only, text frames).

The benchmark's client shares the machine with the server it measures. Tornado's client costs
about 40 us of Python per message (a future and a task step each); at 100 jobs x 100 lines/s x
3 viewers that is more than a core, so the client, not the server, set the latencies. This
reader parses every frame that one socket read brought in one loop (a browser does this part in
C++), answers pings, and hands the messages over as a list.

Only what the benchmark needs: a GET upgrade with a token, unmasked server frames (RFC 6455
5.1), no extensions, no fragmentation (tornado sends each message in one frame).
"""

from __future__ import annotations

import asyncio
import base64
import os
import struct
from collections.abc import AsyncIterator

_OPCODE_TEXT, _OPCODE_CLOSE, _OPCODE_PING = 0x1, 0x8, 0x9
_READ = 256 * 1024


async def messages(port: int, path: str, token: str) -> AsyncIterator[list[bytes]]:
    """The text messages of ``ws://127.0.0.1:port/path``, in the batches they arrived in;
    ends when the server closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write(
            (
                f"GET /{path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                f"Sec-WebSocket-Version: 13\r\nAuthorization: token {token}\r\n\r\n"
            ).encode()
        )
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 101"):
            raise ConnectionError(f"no websocket upgrade: {head.splitlines()[0]!r}")
        buffer = b""
        while chunk := await reader.read(_READ):
            buffer += chunk
            batch: list[bytes] = []
            closed = False
            start = 0
            while True:
                frame = _frame(buffer, start)
                if frame is None:
                    break
                opcode, payload, start = frame
                if opcode == _OPCODE_TEXT:
                    batch.append(payload)
                elif opcode == _OPCODE_PING:
                    writer.write(_masked(0xA, payload))
                elif opcode == _OPCODE_CLOSE:
                    closed = True
                    break
            buffer = buffer[start:]
            if batch:
                yield batch
            if closed:
                return
    finally:
        writer.close()


def _frame(data: bytes, start: int) -> tuple[int, bytes, int] | None:
    """(opcode, payload, where the next frame starts), or None when the frame is not all in."""
    if len(data) - start < 2:
        return None
    opcode, length = data[start] & 0x0F, data[start + 1] & 0x7F
    at = start + 2
    if length == 126:
        if len(data) - at < 2:
            return None
        (length,) = struct.unpack_from("!H", data, at)
        at += 2
    elif length == 127:
        if len(data) - at < 8:
            return None
        (length,) = struct.unpack_from("!Q", data, at)
        at += 8
    if len(data) - at < length:
        return None
    return opcode, data[at : at + length], at + length


def _masked(opcode: int, payload: bytes) -> bytes:
    """A client frame (clients must mask, RFC 6455 5.3); only for short control frames."""
    mask = os.urandom(4)
    body = bytes(byte ^ mask[index % 4] for index, byte in enumerate(payload))
    return bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + body
