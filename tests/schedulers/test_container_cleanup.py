"""50 container jobs on a real podman leave only what the settings keep: no container once the
results are in (``keep_finished`` keeps them all), and per job one small folder with its
terminal state and outputs."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import pytest

from j2c_server.schedulers.base import JobSpec
from j2c_server.schedulers.container.backend import ContainerScheduler
from j2c_server.schedulers.container.lifecycle import LABEL_RUNS, runs_label
from j2c_server.schedulers.container.spec import runs_root
from j2c_server.wire.api import JobStatus
from tests.support.podman import Podman

JOBS = 50
AT_ONCE = 5


async def _ours(podman: Podman, label: str) -> list[str]:
    transport = httpx.AsyncHTTPTransport(uds=podman.socket)
    async with httpx.AsyncClient(transport=transport, base_url="http://e/v1.41") as client:
        listed = await client.get(
            "/containers/json",
            params={"all": "1", "filters": json.dumps({"label": [f"{LABEL_RUNS}={label}"]})},
        )
    return [str(c["Id"]) for c in listed.json()]


async def _run_all(scheduler: ContainerScheduler, podman: Podman) -> list[JobStatus]:
    gate = asyncio.Semaphore(AT_ONCE)

    async def one(index: int) -> JobStatus:
        async with gate:
            spec = JobSpec(
                key=f"cleanup-{time.monotonic_ns()}-{index}",
                job_id=f"c{index}",
                name="cleanup",
                image=podman.image,
                command=["sh", "-c", f'echo job {index}; echo {index} > "$J2C_OUTPUT_DIR/n"'],
            )
            handle = await scheduler.submit(spec)
            [line async for line in scheduler.follow_logs(handle)]
            state = await scheduler.status(handle)
            results = await scheduler.results(handle)
            assert [a.name for a in results.artifacts] == ["n"]
            again = await scheduler.status(handle)  # removed now: the recorded state wins
            assert again.status == state.status
            return state.status

    return list(await asyncio.gather(*(one(i) for i in range(JOBS))))


@pytest.mark.parametrize("keep_finished", [False, True])
def test_fifty_jobs_leave_only_what_the_settings_keep(
    podman: Podman, tmp_path: Path, keep_finished: bool
) -> None:
    settings = podman.settings(tmp_path / "data", keep_finished=keep_finished)
    scheduler = ContainerScheduler(settings)
    label = runs_label(runs_root(settings))

    async def go() -> tuple[list[JobStatus], list[str]]:
        try:
            statuses = await _run_all(scheduler, podman)
        finally:
            await scheduler.close()
        return statuses, await _ours(podman, label)

    statuses, left = asyncio.run(go())
    assert statuses == [JobStatus.succeeded] * JOBS
    assert len(left) == (JOBS if keep_finished else 0)
    folders = sorted(runs_root(settings).iterdir())
    assert len(folders) == JOBS
    assert all(
        sorted(p.name for p in f.iterdir()) == ["final.json", "home", "outputs"] for f in folders
    )
    kept = sum(p.stat().st_size for p in runs_root(settings).rglob("*") if p.is_file())
    assert kept < JOBS * 1024, kept  # a terminal state and a 3-byte output per job
    if keep_finished:  # cleaned up here: the setting kept them for someone to look at

        async def remove() -> None:
            transport = httpx.AsyncHTTPTransport(uds=podman.socket)
            async with httpx.AsyncClient(transport=transport, base_url="http://e/v1.41") as c:
                for cid in left:
                    await c.delete(f"/containers/{cid}", params={"force": "1"})

        asyncio.run(remove())
