"""A finished container job collected while the data dir's disk is full: its terminal state
waits for space, then the container goes.

Found by the chaos soak's container leg with the full disk (benchmarks/soak.py --backend
container --disk-full): the results stage could not write ``final.json`` (ENOSPC), so it raised
and never removed the container; the start-up sweep removes only containers with a
``final.json``, so that one stayed on the engine for good. The engine is the real podman; the
data dir a real 8 MB tmpfs filled by a ballast file (skipped, saying why, where it cannot be
mounted).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from j2c_server.schedulers.base import JobSpec
from j2c_server.schedulers.container.backend import ContainerScheduler
from j2c_server.schedulers.container.lifecycle import FINAL
from j2c_server.wire.api import JobStatus
from tests.support.full_disk import small_disk, take_all_space
from tests.support.podman import Podman


@pytest.fixture
def small_data_dir(tmp_path: Path) -> Iterator[Path]:
    with small_disk(tmp_path / "data", 8) as data:
        yield data


async def on_engine(podman: Podman, name: str) -> bool:
    transport = httpx.AsyncHTTPTransport(uds=podman.socket)
    async with httpx.AsyncClient(transport=transport, base_url="http://engine") as client:
        return (await client.get(f"/v1.41/containers/{name}/json")).status_code == 200


def test_results_on_a_full_disk_wait_for_space_then_remove_the_container(
    podman: Podman, small_data_dir: Path
) -> None:
    async def go() -> None:
        scheduler = ContainerScheduler(podman.settings(small_data_dir, cache=False))
        job_id = f"t{time.monotonic_ns()}"
        spec = JobSpec(
            key=f"key-{job_id}",
            job_id=job_id,
            name="full-disk",
            image=podman.image,
            command=["sh", "-c", "echo done"],
        )
        handle = await scheduler.submit(spec)
        try:
            deadline = time.monotonic() + 60
            while (state := await scheduler.status(handle)).status != JobStatus.succeeded:
                assert time.monotonic() < deadline, state
                await asyncio.sleep(0.2)

            take_all_space(small_data_dir / "ballast")
            collecting = asyncio.ensure_future(scheduler.results(handle))
            await asyncio.sleep(1.5)
            assert not collecting.done(), collecting  # waiting for space, not failed
            assert await on_engine(podman, handle.id)
            (small_data_dir / "ballast").unlink()

            results = await asyncio.wait_for(collecting, 30)
            assert results.exit_code == 0
            assert (Path(handle.data["folder"]) / FINAL).is_file()
            assert not await on_engine(podman, handle.id)
            assert (await scheduler.status(handle)).status == JobStatus.succeeded
        finally:
            (small_data_dir / "ballast").unlink(missing_ok=True)
            if await on_engine(podman, handle.id):
                transport = httpx.AsyncHTTPTransport(uds=podman.socket)
                async with httpx.AsyncClient(transport=transport, base_url="http://e") as client:
                    await client.delete(f"/v1.41/containers/{handle.id}", params={"force": "1"})
            await scheduler.close()

    asyncio.run(go())
