"""The behavioural contract every scheduler backend passes, run once per backend of
:data:`tests.contract.drivers.BACKENDS`: local, Slurm (real, ``scripts/slurm-up.sh``), container
(real podman), Kubernetes (the repo's fake API server, because no real cluster can run here,
with :mod:`tests.contract.kubelet` as its node), Ray (a real one-node head,
``scripts/ray-up.sh``) and ``remote``, the plug-in installed from the test package
(``tests/plugins/j2c_test_remote``).

Every job is the real thing: a tiny project packed and published to the backend's store, run
by ``j2c-unpack`` with ``--output-uri`` (its outputs index comes back to the store). Where a
test must hold a job, the job waits for a gate file the test opens, so no test depends on
timing. What each backend does beyond the contract stays in ``tests/schedulers/``.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator

import pytest

from j2c_server.core.errors import InvalidInput
from j2c_server.jobs.results import collect_outputs
from j2c_server.jobs.service import JobService
from j2c_server.schedulers import check_resources, scheduler_class
from j2c_server.schedulers.base import JobSpec, LogLine, Scheduler, SchedulerState
from j2c_server.storage import open_store
from j2c_server.wire.api import JobHandle, JobRecord, JobRequest, JobResults, JobStatus, Resources
from tests.contract.drivers import Driver

TIMEOUT_S = 120.0
UNPACK_PREFIX = "j2c: "  # j2c-unpack's own lines, around the program's


async def submit(driver: Driver, scheduler: Scheduler, spec: JobSpec) -> JobHandle:
    handle = await scheduler.submit(spec)
    driver.handles.append(handle)
    return handle


def program(lines: list[LogLine]) -> list[str]:
    """What the job's program printed."""
    return [line.text for line in lines if not line.text.startswith(UNPACK_PREFIX)]


async def read(scheduler: Scheduler, handle: JobHandle, cursor: str | None = None) -> list[LogLine]:
    """Every line from ``cursor`` until the job has ended and its output is drained."""
    async with asyncio.timeout(TIMEOUT_S):
        return [line async for line in scheduler.follow_logs(handle, cursor)]


async def read_until(
    scheduler: Scheduler, handle: JobHandle, last: str, cursor: str | None = None
) -> list[LogLine]:
    """Lines up to the program's line ``last``; then this follower goes away."""
    lines: list[LogLine] = []
    follower: AsyncIterator[LogLine] = scheduler.follow_logs(handle, cursor)
    try:
        async with asyncio.timeout(TIMEOUT_S):
            async for line in follower:
                lines.append(line)
                if line.text == last:
                    return lines
    finally:
        await follower.aclose()  # type: ignore[attr-defined]
    raise AssertionError(f"the logs ended before {last!r}: {[line.text for line in lines]}")


async def ended(scheduler: Scheduler, handle: JobHandle) -> SchedulerState:
    async with asyncio.timeout(TIMEOUT_S):
        while not (state := await scheduler.status(handle)).status.terminal:
            await asyncio.sleep(0.1)
    return state


# --------------------------------------------------------------------------- the contract


async def test_a_second_submit_of_one_key_returns_the_same_handle_and_one_job_runs(
    driver: Driver,
) -> None:
    spec = driver.spec(3)
    scheduler = driver.make()
    try:
        first = await submit(driver, scheduler, spec)
        again = await submit(driver, scheduler, spec)
        assert again == first
        assert program(await read(scheduler, first)) == ["line 0", "line 1", "line 2"]
        assert (await ended(scheduler, first)).status == JobStatus.succeeded
    finally:
        await scheduler.close()
    assert len(driver.starts(spec)) == 1


async def test_following_from_a_stored_cursor_with_a_new_scheduler_loses_and_doubles_nothing(
    driver: Driver,
) -> None:
    spec = driver.spec(5, "more")
    old = driver.make()
    handle = await submit(driver, old, spec)
    seen = await read_until(old, handle, "line 2")  # the follower goes away mid-stream
    await old.close()
    stored = JobHandle.model_validate_json(handle.model_dump_json())  # as the registry keeps it
    driver.open_gate(spec, "more")
    new = driver.make()
    try:
        rest = await read(new, stored, seen[-1].cursor)
        again = await read(new, stored, seen[-1].cursor)  # a watcher that died twice
    finally:
        await new.close()
    assert program(seen + rest) == [f"line {i}" for i in range(10)]
    assert program(again) == program(rest)


async def test_a_new_scheduler_adopts_a_running_job_and_follows_it_to_the_end(
    driver: Driver,
) -> None:
    spec = driver.spec(2, "finish")
    old = driver.make()
    handle = await submit(driver, old, spec)
    seen = await read_until(old, handle, "line 1")  # the job now waits at its gate
    await old.close()
    new = driver.make()  # the server restarted; its pipeline submits the job's key again
    try:
        adopted = await submit(driver, new, spec)
        assert adopted == handle
        assert (await new.status(adopted)).status == JobStatus.running
        follower = asyncio.ensure_future(read(new, adopted, seen[-1].cursor))
        driver.open_gate(spec, "finish")
        assert program(await follower) == ["line 2", "line 3"]
        state = await ended(new, adopted)
    finally:
        await new.close()
    assert (state.status, state.exit_code) == (JobStatus.succeeded, 0)
    assert len(driver.starts(spec)) == 1


async def test_cancel_ends_the_job_as_cancelled_with_nothing_left_running(driver: Driver) -> None:
    spec = driver.spec(1, "never")
    scheduler = driver.make()
    try:
        handle = await submit(driver, scheduler, spec)
        await read_until(scheduler, handle, "line 0")
        assert await driver.still_running(spec, handle)
        await scheduler.cancel(handle)
        assert (await ended(scheduler, handle)).status == JobStatus.cancelled
        deadline = time.monotonic() + TIMEOUT_S
        while await driver.still_running(spec, handle):
            assert time.monotonic() < deadline, "the job still runs after its cancel"
            await asyncio.sleep(0.1)
        await scheduler.cancel(handle)  # again: nothing changes
        assert (await scheduler.status(handle)).status == JobStatus.cancelled
    finally:
        await scheduler.close()
    fresh = driver.make()
    try:
        assert (await fresh.status(handle)).status == JobStatus.cancelled
    finally:
        await fresh.close()


async def test_the_results_are_the_outputs_the_index_lists(driver: Driver) -> None:
    spec = driver.spec(1)
    scheduler = driver.make()
    try:
        handle = await submit(driver, scheduler, spec)
        lines = await read(scheduler, handle)
        assert (await ended(scheduler, handle)).status == JobStatus.succeeded
        results = await scheduler.results(handle)
    finally:
        await scheduler.close()
    assert results.exit_code == 0
    merged = await _collected(driver, spec, results, [line.text for line in lines])
    digest = hashlib.sha256(b"done").hexdigest()
    assert [(a.name, a.size, a.sha256) for a in merged.artifacts] == [("result.txt", 4, digest)]
    outputs = f"{driver.store.as_uri()}/jobs/{spec.job_id}/outputs"
    assert merged.output_uri == outputs
    assert merged.artifacts[0].url == f"{outputs}/result.txt"
    assert merged.outputs_note is None


async def _collected(
    driver: Driver, spec: JobSpec, results: JobResults, lines: list[str]
) -> JobResults:
    now = time.time()
    record = JobRecord(
        id=spec.job_id,
        name=spec.name,
        key=spec.key,
        status=JobStatus.succeeded,
        request=JobRequest(code_path="/contract-project", call_path="job.py"),
        scheduler=driver.name,
        created_at=now,
        updated_at=now,
    )
    store = open_store(driver.store.as_uri())
    try:
        return await collect_outputs(store, record, results, uploaded=True, last_lines=lines)
    finally:
        await store.close()


# What each capability's lack refuses, and the field the refusal names.
ASKING = {
    "gpus": (Resources(gpus=1), "resources.gpus"),
    "gpu_types": (Resources(gpus=1, gpu_type="h100"), "resources.gpu_type"),
    "multi_node": (Resources(nodes=2), "resources.nodes"),
}


async def test_what_the_backend_cannot_do_is_refused_before_anything_is_sent(
    driver: Driver,
) -> None:
    can = scheduler_class(driver.name).capabilities
    service = JobService(driver.settings)
    manifests = sorted((driver.store / "manifests").rglob("*.json"))
    try:
        for capability, (resources, field) in ASKING.items():
            if getattr(can, capability):
                check_resources(driver.name, resources)  # what it declares, it takes
                continue
            request = JobRequest(
                code_path=str(driver.project),
                call_path=str(driver.project / "job.py"),
                scheduler=driver.name,
                resources=resources,
            )
            with pytest.raises(InvalidInput) as caught:
                await service.submit(request)
            assert caught.value.field == (field if can.gpus else "resources.gpus")
            assert f"the {driver.name} scheduler" in caught.value.message
        assert await service.list_jobs() == []  # no job recorded, packed or submitted
    finally:
        await service.stop()
    assert sorted((driver.store / "manifests").rglob("*.json")) == manifests
