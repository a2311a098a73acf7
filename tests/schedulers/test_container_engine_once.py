"""The container backend reads the engine once, however many submits ask at the same time.

Found by the chaos soak's container leg (benchmarks/soak.py --backend container): 30 sends at
once each asked podman ``GET /info`` and ``GET /libpod/info`` (every one of them seconds on a
loaded machine: podman asks the package manager for its helpers' versions at every call), so no
submit finished before the soak's next server kill, and after every restart the same again: no
job left ``packing`` for five minutes. The engine is the real podman, behind a forwarder on a
unix socket of the test's own that counts the requests it passes on.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from pathlib import Path

from j2c_server.schedulers.container.backend import ContainerScheduler
from j2c_server.schedulers.container.engine import EngineInfo
from tests.support.podman import Podman


class CountingForwarder:
    """A unix socket that passes every connection on to the engine's, counting request lines."""

    def __init__(self, engine: str, path: Path) -> None:
        self.engine = engine
        self.path = path
        self.requests: Counter[str] = Counter()
        self.server: asyncio.AbstractServer | None = None

    async def __aenter__(self) -> CountingForwarder:
        self.server = await asyncio.start_unix_server(self._client, path=str(self.path))
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_unix_connection(self.engine)

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, count: bool) -> None:
            with contextlib.suppress(ConnectionError):
                while chunk := await src.read(65536):
                    if count:
                        for line in chunk.split(b"\r\n"):
                            method, _, rest = line.partition(b" ")
                            if method in (b"GET", b"POST", b"DELETE") and rest.startswith(b"/"):
                                self.requests[rest.split(b" ")[0].split(b"?")[0].decode()] += 1
                    dst.write(chunk)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pump(reader, up_writer, True), pump(up_reader, writer, False))


def engine_reads(requests: Counter[str]) -> int:
    return sum(n for path, n in requests.items() if path.endswith(("/info", "/libpod/info")))


def test_concurrent_submits_read_the_engine_once(podman: Podman, tmp_path: Path) -> None:
    async def go() -> tuple[list[EngineInfo], Counter[str]]:
        async with CountingForwarder(podman.socket, tmp_path / "engine.sock") as forwarder:
            settings = podman.settings(tmp_path / "data", socket=str(forwarder.path))
            scheduler = ContainerScheduler(settings)
            try:
                infos = await asyncio.gather(*(scheduler.engine() for _ in range(8)))
            finally:
                await scheduler.close()
            return list(infos), forwarder.requests

    infos, requests = asyncio.run(go())
    assert infos == [EngineInfo(podman=True, rootless=False)] * 8  # the test engine: root
    assert engine_reads(requests) == 1, requests
