"""The Ray backend against a real one-node Ray head (``scripts/ray-up.sh``: 2 CPUs, one fake
GPU, an ``accelerator_type:FAKE`` resource), through its Jobs REST API: no mocks. What every
backend does (idempotent submit, cursor resume, adoption, cancel, results) is the contract
suite's (``tests/contract``, which runs on this head too); here is what is Ray's own.

Jobs are small Python programs run by the head's Python (the node is this machine).
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import secrets
import shlex
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from j2c_server.core.errors import InvalidInput
from j2c_server.schedulers.base import JobSpec, LogLine, SchedulerState
from j2c_server.schedulers.ray.backend import RayScheduler, submission_id
from j2c_server.schedulers.unpack_cache import tenant_name
from j2c_server.wire.api import JobHandle, JobRequest, JobStatus, Resources
from tests.support.projects import write
from tests.support.ray import RayHead
from tests.support.service_run import run_job

pytestmark = pytest.mark.ray

TIMEOUT_S = 60.0


def spec_of(code: str, **fields: object) -> JobSpec:
    job_id = f"r{secrets.token_hex(5)}"
    return JobSpec(
        key=f"ray-test-{job_id}",
        job_id=job_id,
        name=job_id,
        command=["python", "-c", code],
        **fields,  # type: ignore[arg-type]
    )


@contextlib.asynccontextmanager
async def opened(head: RayHead, store: Path) -> AsyncIterator[RayScheduler]:
    made = RayScheduler(head.settings(store))
    try:
        yield made
    finally:
        await made.close()


async def ended(scheduler: RayScheduler, handle: JobHandle) -> SchedulerState:
    async with asyncio.timeout(TIMEOUT_S):
        while not (state := await scheduler.status(handle)).status.terminal:
            await asyncio.sleep(0.1)
    return state


async def lines_of(scheduler: RayScheduler, handle: JobHandle) -> list[LogLine]:
    async with asyncio.timeout(TIMEOUT_S):
        return [line async for line in scheduler.follow_logs(handle)]


async def ray_job(head: RayHead, handle: JobHandle) -> dict[str, object]:
    """The job as Ray's REST API shows it."""
    async with httpx.AsyncClient(base_url=head.address) as client:
        answer = await client.get(f"/api/jobs/{handle.id}")
    answer.raise_for_status()
    job: dict[str, object] = answer.json()
    return job


async def test_a_failing_entrypoint_ends_failed_with_its_exit_code_and_its_last_words(
    ray_head: RayHead,
    tmp_path: Path,
) -> None:
    async with opened(ray_head, tmp_path / "store") as scheduler:
        handle = await scheduler.submit(spec_of("import sys; print('about to fail'); sys.exit(3)"))
        lines = [line.text for line in await lines_of(scheduler, handle)]
        state = await ended(scheduler, handle)
        assert (state.status, state.exit_code) == (JobStatus.failed, 3)
        assert lines == ["about to fail"]  # Ray's own lines are not the job's
        assert (await scheduler.results(handle)).exit_code == 3


async def test_gpus_and_a_gpu_type_reach_ray_as_entrypoint_resources(
    ray_head: RayHead,
    tmp_path: Path,
) -> None:
    async with opened(ray_head, tmp_path / "store") as scheduler:
        code = "import os; print('cuda', os.environ.get('CUDA_VISIBLE_DEVICES'))"
        handle = await scheduler.submit(
            spec_of(code, resources=Resources(gpus=1, cpus=1, memory="100Mi", gpu_type="FAKE"))
        )
        lines = [line.text for line in await lines_of(scheduler, handle)]
        assert (await ended(scheduler, handle)).status == JobStatus.succeeded
        assert lines == ["cuda 0"]  # Ray gave the entrypoint the head's one GPU


@pytest.mark.parametrize(
    "resources",
    [Resources(cpus=3), Resources(gpus=1, gpu_type="H100")],
    ids=["cpus", "gpu-type"],
)
async def test_what_the_head_lacks_keeps_the_job_waiting(
    ray_head: RayHead, tmp_path: Path, resources: Resources
) -> None:
    """The head has 2 CPUs and an accelerator_type:FAKE: asking for 3 CPUs or an H100 reaches
    Ray as entrypoint resources, so the job waits (it would run if they were ignored)."""
    async with opened(ray_head, tmp_path / "store") as scheduler:
        handle = await scheduler.submit(spec_of("print('ran')", resources=resources))
        await asyncio.sleep(3)
        assert (await scheduler.status(handle)).status == JobStatus.queued
        await scheduler.cancel(handle)


async def test_more_gpus_than_the_cluster_has_waits_queued_saying_why(
    ray_head: RayHead,
    tmp_path: Path,
) -> None:
    async with opened(ray_head, tmp_path / "store") as scheduler:
        handle = await scheduler.submit(spec_of("print('never')", resources=Resources(gpus=2)))
        await asyncio.sleep(1)
        state = await scheduler.status(handle)
        assert state.status == JobStatus.queued
        assert state.message and "resources" in state.message  # Ray's words: what it waits for
        await scheduler.cancel(handle)  # Ray keeps such a job PENDING (docs/ray.md)


async def test_a_job_cancelled_while_it_waits_for_the_gpu_never_runs_its_code(
    ray_head: RayHead, tmp_path: Path
) -> None:
    """Ray answers a stop sent while a job waits for resources at once but applies it only
    when the job starts (ray#58353 reports it as lost): the job's first instant runs, which
    under j2c is ``j2c-unpack``'s start, never the user's code. (Before the entrypoint was
    ``exec``'d, a clean-clone CI saw this job's code run to its end: Ray had signalled the
    shell before the shell had forked it.)"""
    async with opened(ray_head, tmp_path / "store") as scheduler:
        gate, ran = tmp_path / "gate", tmp_path / "ran"
        holder = await scheduler.submit(
            spec_of(
                f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.05)",
                resources=Resources(gpus=1),
            )
        )
        waiting = await scheduler.submit(
            spec_of(
                f"import time; time.sleep(2); open({str(ran)!r}, 'w').close(); print('ran')",
                resources=Resources(gpus=1),
            )
        )
        async with asyncio.timeout(TIMEOUT_S):
            while (await scheduler.status(holder)).status != JobStatus.running:
                await asyncio.sleep(0.1)
        assert (await scheduler.status(waiting)).status == JobStatus.queued
        await scheduler.cancel(waiting)
        gate.touch()  # the GPU frees: Ray starts the waiting job and stops it
        assert (await ended(scheduler, holder)).status == JobStatus.succeeded
        assert (await ended(scheduler, waiting)).status == JobStatus.cancelled
        await asyncio.sleep(2.5)
        assert not ran.exists()


async def test_the_process_ray_starts_and_stops_is_the_command_itself(
    ray_head: RayHead, tmp_path: Path
) -> None:
    """No shell stands between Ray and the command: Ray's stop signals the process it started
    and the children that process has at that instant, so a shell that had not yet forked the
    command would have been the only one signalled (ray.entrypoint)."""
    async with opened(ray_head, tmp_path / "store") as scheduler:
        code = "import os; print(open(f'/proc/{os.getppid()}/cmdline').read().split(chr(0))[:2])"
        handle = await scheduler.submit(spec_of(code))
        [line] = [line.text for line in await lines_of(scheduler, handle)]
        parent = ast.literal_eval(line)
        assert "sh" not in {Path(word).name for word in parent}, parent  # Ray's worker, not sh


async def test_the_job_gets_its_environment_and_the_submission_id_follows_the_key(
    ray_head: RayHead, tmp_path: Path
) -> None:
    async with opened(ray_head, tmp_path / "store") as scheduler:
        code = "import os; print(os.environ['J2C_JOB_ID'], os.environ['GREETING'])"
        spec = spec_of(code, env={"GREETING": "hello ray"})
        handle = await scheduler.submit(spec)
        lines = [line.text for line in await lines_of(scheduler, handle)]
        assert lines == [f"{spec.job_id} hello ray"]
        assert handle.id == submission_id(spec.key)
        job = await ray_job(ray_head, handle)
        assert job["metadata"] == {
            "j2c_job_id": spec.job_id,
            "j2c_key": spec.key,
            "j2c_name": spec.name,
            "j2c_user": tenant_name(),  # whose it is, for a preflight of a shared cluster
        }
        assert job["entrypoint"] == "exec " + shlex.join(spec.command)
        assert "working_dir" not in (job.get("runtime_env") or {})  # nothing shipped through Ray


async def test_what_ray_cannot_do_is_refused_naming_the_field_before_anything_is_sent(
    ray_head: RayHead, tmp_path: Path
) -> None:
    async with opened(ray_head, tmp_path / "store") as scheduler:
        for fields, field in [
            ({"resources": Resources(time_limit_minutes=5)}, "resources.time_limit_minutes"),
            ({"image": "registry.example/other:1"}, "image"),
        ]:
            spec = spec_of("print('no')", **fields)
            with pytest.raises(InvalidInput) as caught:
                await scheduler.submit(spec)
            assert caught.value.field == field
            async with httpx.AsyncClient(base_url=ray_head.address) as client:
                assert (await client.get(f"/api/jobs/{submission_id(spec.key)}")).status_code == 404


async def test_a_project_runs_through_the_job_service_and_its_outputs_come_back(
    ray_head: RayHead, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    write(
        project / "train.py",
        "import json, os, pathlib\n"
        "print('training on ray')\n"
        "pathlib.Path('models').mkdir()\n"
        "pathlib.Path('models/a.bin').write_bytes(b'weights')\n"
        "pathlib.Path(os.environ['J2C_OUTPUT_DIR'], 'metrics.json').write_text("
        "json.dumps({'loss': 0.5}))\n",
    )
    final, lines = await run_job(
        ray_head.settings(tmp_path / "store"),
        JobRequest(code_path=str(project), call_path=str(project / "train.py"), scheduler="ray"),
    )
    assert final.status == JobStatus.succeeded, (final.message, lines[-5:])
    assert final.exit_code == 0 and "training on ray" in lines
    assert final.results is not None
    names = sorted(artifact.name for artifact in final.results.artifacts)
    assert names == ["metrics.json", "models/a.bin"], names
