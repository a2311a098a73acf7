"""A follow stream the engine keeps open after its container exited does not hold the job's
watch: the silent stream is re-opened once the container's state was read again, and the log
is drained with a plain read (podman did this once in CI: a watch waited the old 300 s bound).

The engine here is a small HTTP server on a unix socket that answers as podman does for the
three requests the follow makes; podman itself cannot be made to keep such a stream open on
demand."""

from __future__ import annotations

import asyncio
import json
import struct
from pathlib import Path
from typing import cast

from j2c_server.schedulers.container.api import EngineClient
from j2c_server.schedulers.container.gpus import GpuWaiter
from j2c_server.schedulers.container.logs import follow_container_logs

STAMP = "2026-12-05T10:00:00.{:09d}Z"


def _frame(n: int, text: str) -> bytes:
    payload = f"{STAMP.format(n)} {text}\n".encode()
    return struct.pack(">BxxxL", 1, len(payload)) + payload


class StuckEngine:
    """Running for the first inspect, exited after; a follow sends the first line and then
    nothing, never ending; a plain read sends the whole log."""

    def __init__(self) -> None:
        self.inspects = 0
        self.follows = 0
        self.plain_reads = 0
        self.released = asyncio.Event()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._requests(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client closed the connection
        finally:
            writer.close()

    async def _requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            target = head.split(b" ", 2)[1].decode()
            if "/json" in target:
                self.inspects += 1
                state = "running" if self.inspects == 1 else "exited"
                body = json.dumps({"State": {"Status": state, "ExitCode": 0}}).encode()
                self._answer(writer, body)
            elif "follow=1" in target:
                self.follows += 1
                chunk = _frame(1, "step 1")
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.docker.raw-stream\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n"
                    + f"{len(chunk):x}\r\n".encode()
                    + chunk
                    + b"\r\n"
                )
                await writer.drain()
                await self.released.wait()  # the container exited; the stream stays open
                return
            else:
                self.plain_reads += 1
                self._answer(writer, _frame(1, "step 1") + _frame(2, "done"))
            await writer.drain()

    @staticmethod
    def _answer(writer: asyncio.StreamWriter, body: bytes) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )


async def test_a_follow_left_open_after_the_exit_ends_with_the_whole_log(tmp_path: Path) -> None:
    engine = StuckEngine()
    socket = str(tmp_path / "engine.sock")
    server = await asyncio.start_unix_server(engine.serve, path=socket)
    client = EngineClient(socket, "v1.41")
    gpus = cast(GpuWaiter, None)  # only asked while the container does not exist yet
    try:
        async with asyncio.timeout(20):
            lines = [
                line.text
                async for line in follow_container_logs(
                    lambda: client, "c", tmp_path, gpus, 0.05, idle_s=0.5
                )
            ]
    finally:
        await client.aclose()
        engine.released.set()
        server.close()
        await server.wait_closed()
    assert lines == ["step 1", "done"]  # nothing lost, nothing twice
    assert engine.follows == 1 and engine.plain_reads == 1 and engine.inspects == 2
