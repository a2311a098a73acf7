"""A container job's log, followed: ``/logs?follow=1&timestamps=1`` from a timestamp cursor
(:class:`.api.LogReader`), re-opened when the stream drops, and drained with one plain
read once the container has exited. A job still waiting for its GPUs has no container yet: its
log is waited for."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx

from j2c_server.core.errors import SchedulerError
from j2c_server.schedulers.base import LogLine
from j2c_server.schedulers.container.api import FOLLOW_IDLE_S, EngineClient, LogCursor, LogReader
from j2c_server.schedulers.container.gpus import GpuWaiter
from j2c_server.schedulers.container.status import FINISHED, state_of


async def follow_container_logs(
    api: Callable[[], EngineClient],
    name: str,
    folder: Path,
    gpus: GpuWaiter,
    poll_interval_s: float,
    cursor: str | None = None,
    *,
    idle_s: float = FOLLOW_IDLE_S,
) -> AsyncIterator[LogLine]:
    """The log lines of container ``name`` after ``cursor``, to the container's end; a follow
    silent for ``idle_s`` is re-opened once the container's state was read again."""
    position = LogCursor.parse(cursor)
    while True:
        info = await api().inspect(name)
        if info is None:
            if await asyncio.to_thread(gpus.waiting, folder) is None:
                return
            await asyncio.sleep(poll_interval_s)
            continue
        state = state_of(info)
        if state in ("created", "configured"):
            await asyncio.sleep(poll_interval_s)
            continue
        finished = state in FINISHED
        reader = LogReader(position)
        received = False
        async for line in _read_log(api(), name, reader, follow=not finished, idle_s=idle_s):
            received = True
            yield line
        position = reader.cursor
        if finished:
            for line in reader.finish():
                yield line
            return
        if not received:
            await asyncio.sleep(poll_interval_s)


async def _read_log(
    api: EngineClient, name: str, reader: LogReader, *, follow: bool, idle_s: float
) -> AsyncIterator[LogLine]:
    params = {
        "stdout": "1",
        "stderr": "1",
        "timestamps": "1",
        "follow": "1" if follow else "0",
        "since": reader.cursor.since(),
    }
    timeout = httpx.Timeout(30.0, connect=10.0, read=idle_s if follow else 60.0)
    try:
        async with api.stream(
            f"/containers/{name}/logs", params=params, timeout=timeout
        ) as response:
            if response.status_code == 404:
                return
            if response.status_code >= 400:
                await response.aread()
                raise SchedulerError(
                    f"reading the logs of {name} failed ({response.status_code}): "
                    f"{response.text[:500]}"
                )
            async for chunk in response.aiter_bytes():
                for line in reader.feed(chunk):
                    yield line
    except httpx.ConnectError:
        raise
    except httpx.TransportError:
        return  # dropped mid-stream: the caller re-opens from the cursor
