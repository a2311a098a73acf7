"""The Slurm backend against a real Slurm 22.05 (slurmctld, slurmd, slurmrestd with JWT auth and
two fake GPUs) started by ``scripts/slurm-up.sh``: no mocks.

Jobs are small Python programs run by this interpreter (the cluster is this machine). Where a
test must hold a job at some point, the job waits for a "gate" file that the test creates, so no
test depends on timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import secrets
import shutil
import stat
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from j2c_server.core.errors import ConfigError, InvalidInput, SchedulerError, SchedulerUnavailable
from j2c_server.schedulers.base import JobSpec, LogLine, SchedulerState
from j2c_server.schedulers.slurm.backend import SlurmScheduler
from j2c_server.wire.api import JobHandle, JobRequest, JobStatus, Resources
from tests.support.service_run import run_job
from tests.support.slurm import SlurmCluster

pytestmark = pytest.mark.slurm

TIMEOUT_S = 30.0
UNSCHEDULED = "waiting to be scheduled"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "digits"
_RUN = secrets.token_hex(3)  # job ids stay unique on a cluster that outlives this session
_serial = itertools.count()

# Prepended to every job: wait_for(path) blocks until the test opens that gate.
_PRELUDE = """\
import os, signal, sys, time
def wait_for(path):
    while not os.path.exists(path):
        time.sleep(0.02)
"""


def python_job(code: str, *args: str) -> list[str]:
    return [sys.executable, "-c", _PRELUDE + textwrap.dedent(code), *args]


def job_spec(code: str, *args: str, gpus: int = 0, **fields: Any) -> JobSpec:
    job_id = f"t{_RUN}-{next(_serial)}"
    fields.setdefault("key", f"key-{job_id}")
    return JobSpec(
        job_id=job_id,
        name=job_id,
        command=python_job(code, *args),
        resources=Resources(gpus=gpus, gpu_type=fields.pop("gpu_type", None)),
        **fields,
    )


@pytest.fixture
def gates(slurm_cluster: SlurmCluster) -> Iterator[Path]:
    """A folder for gate files that the jobs (running as the cluster's user) can see."""
    path = slurm_cluster.job_dir / f"gates-{_RUN}-{next(_serial)}"
    path.mkdir(parents=True)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def submitted(slurm_cluster: SlurmCluster) -> Iterator[list[str]]:
    """Slurm ids of the test's jobs: whatever still runs at the end is removed."""
    ids: list[str] = []
    yield ids
    slurm_cluster.scancel(ids)


@contextlib.asynccontextmanager
async def open_scheduler(cluster: SlurmCluster, **slurm: Any) -> AsyncIterator[SlurmScheduler]:
    scheduler = SlurmScheduler(cluster.settings(**slurm))
    try:
        yield scheduler
    finally:
        await scheduler.close()


async def submit(scheduler: SlurmScheduler, spec: JobSpec, ids: list[str]) -> JobHandle:
    handle = await scheduler.submit(spec)
    ids.append(handle.id)
    return handle


async def wait_for_status(
    scheduler: SlurmScheduler, handle: JobHandle, *wanted: JobStatus
) -> SchedulerState:
    async with asyncio.timeout(TIMEOUT_S):
        while True:
            state = await scheduler.status(handle)
            if state.status in wanted:
                return state
            await asyncio.sleep(0.1)


async def read_lines(
    scheduler: SlurmScheduler, handle: JobHandle, cursor: str | None = None
) -> list[LogLine]:
    async with asyncio.timeout(TIMEOUT_S):
        return [line async for line in scheduler.follow_logs(handle, cursor)]


# ---------------------------------------------------------------------- running jobs


async def test_the_jobs_folder_in_the_shared_job_dir_is_private(
    slurm_cluster: SlurmCluster, submitted: list[str]
) -> None:
    old = os.umask(0o022)
    try:
        async with open_scheduler(slurm_cluster) as scheduler:
            spec = job_spec("print('private')")
            handle = await submit(scheduler, spec, submitted)
            state = await wait_for_status(scheduler, handle, JobStatus.succeeded, JobStatus.failed)
            lines = [line.text for line in await read_lines(scheduler, handle)]
    finally:
        os.umask(old)
    folder = slurm_cluster.job_dir / spec.job_id
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert folder.stat().st_uid == os.getuid()  # the job's user: the token's, this server's
    assert (state.status, lines) == (JobStatus.succeeded, ["private"])  # the job wrote into it


@pytest.mark.parametrize("planted", ["another user's folder", "a symlink"])
async def test_a_run_folder_someone_else_planted_is_refused_and_nothing_is_submitted(
    slurm_cluster: SlurmCluster, submitted: list[str], tmp_path: Path, planted: str
) -> None:
    spec = job_spec("print('must not run')")
    folder = slurm_cluster.job_dir / spec.job_id
    if planted == "a symlink":
        folder.symlink_to(tmp_path, target_is_directory=True)
    else:
        if os.getuid() != 0:
            pytest.skip("making a folder another uid owns needs root")
        folder.mkdir(mode=0o777)
        os.chmod(folder, 0o777)
        os.chown(folder, 65534, 65534)
    try:
        async with open_scheduler(slurm_cluster) as scheduler:
            with pytest.raises(SchedulerError, match="not this user's alone") as caught:
                await submit(scheduler, spec, submitted)
            assert str(folder) in str(caught.value)
            # Nothing reached Slurm: the key's first real submit is a new job.
            folder.unlink() if folder.is_symlink() else folder.rmdir()
            handle = await submit(scheduler, spec, submitted)
            lines = [line.text for line in await read_lines(scheduler, handle)]
            assert len(submitted) == 1 and lines == ["must not run"]
    finally:
        if folder.is_symlink():
            folder.unlink()
    assert list(tmp_path.iterdir()) == []  # nothing was written through the symlink


async def test_a_job_of_another_slurm_user_with_the_same_key_is_not_adopted(
    slurm_cluster: SlurmCluster, submitted: list[str]
) -> None:
    """Another user submits a job whose comment carries this job's key (it can be read off
    ``squeue``): a submit with that key starts this user's own job, it does not adopt theirs."""
    if os.getuid() != 0 or not slurm_cluster.conf or not shutil.which("runuser"):
        pytest.skip("submitting as another Slurm user needs root, runuser and SLURM_CONF")
    spec = job_spec("print('mine')")
    foreign = subprocess.run(
        [
            "runuser",
            "-u",
            "nobody",
            "--",
            "sbatch",
            "--parsable",
            "--output=/dev/null",
            f"--comment=j2c job={spec.job_id} key={spec.key}",
            "--wrap=sleep 60",
        ],
        env={**os.environ, "SLURM_CONF": slurm_cluster.conf},
        capture_output=True,
        text=True,
        timeout=30,
        cwd="/",
    )
    assert foreign.returncode == 0, foreign.stderr
    theirs = foreign.stdout.strip().split(";")[0]
    submitted.append(theirs)
    async with open_scheduler(slurm_cluster) as scheduler:
        handle = await submit(scheduler, spec, submitted)
        lines = [line.text for line in await read_lines(scheduler, handle)]
    assert handle.id != theirs and lines == ["mine"]


async def test_carriage_returns_stay_inside_a_line(
    slurm_cluster: SlurmCluster, submitted: list[str]
) -> None:
    code = r"print('10%\r50%\r100%'); print('done')"
    async with open_scheduler(slurm_cluster) as scheduler:
        handle = await submit(scheduler, job_spec(code), submitted)
        lines = await read_lines(scheduler, handle)
        assert [line.text for line in lines] == ["10%\r50%\r100%", "done"]


async def test_arguments_reach_the_job_verbatim(
    slurm_cluster: SlurmCluster, submitted: list[str]
) -> None:
    tricky = ["two words", "it's", '"quoted"', "$HOME", "; echo injected", "`id`", "*"]
    async with open_scheduler(slurm_cluster) as scheduler:
        handle = await submit(scheduler, job_spec("print(sys.argv[1:])", *tricky), submitted)
        lines = await read_lines(scheduler, handle)
        assert [line.text for line in lines] == [repr(tricky)]


async def test_job_gets_its_environment_and_unbuffered_python(
    slurm_cluster: SlurmCluster, submitted: list[str]
) -> None:
    names = "FROM_SPEC", "FROM_SETTINGS", "PYTHONUNBUFFERED"
    code = f"print(*(os.environ[name] for name in {names!r}))"
    spec = job_spec(code, env={"FROM_SPEC": "spec"})
    async with open_scheduler(slurm_cluster, env={"FROM_SETTINGS": "settings"}) as scheduler:
        handle = await submit(scheduler, spec, submitted)
        lines = await read_lines(scheduler, handle)
        assert [line.text for line in lines] == ["spec settings 1"]


async def test_gpu_job_sees_cuda_visible_devices(
    slurm_cluster: SlurmCluster, submitted: list[str]
) -> None:
    code = "print(os.environ.get('CUDA_VISIBLE_DEVICES'))"
    async with open_scheduler(slurm_cluster) as scheduler:
        handle = await submit(scheduler, job_spec(code, gpus=1, gpu_type="fake"), submitted)
        lines = await read_lines(scheduler, handle)
        assert [line.text for line in lines] in (["0"], ["1"])


async def test_failing_job_reports_its_exit_code(
    slurm_cluster: SlurmCluster, submitted: list[str]
) -> None:
    async with open_scheduler(slurm_cluster) as scheduler:
        handle = await submit(scheduler, job_spec("sys.exit(3)"), submitted)
        state = await wait_for_status(scheduler, handle, JobStatus.failed, JobStatus.succeeded)
        assert (state.status, state.exit_code) == (JobStatus.failed, 3)
        assert "exit code 3" in (state.message or "")
        assert (await scheduler.results(handle)).exit_code == 3


async def test_job_killed_by_a_signal_reports_128_plus_the_signal(
    slurm_cluster: SlurmCluster, submitted: list[str]
) -> None:
    async with open_scheduler(slurm_cluster) as scheduler:
        handle = await submit(scheduler, job_spec("os.kill(os.getpid(), 9)"), submitted)
        state = await wait_for_status(scheduler, handle, JobStatus.failed, JobStatus.succeeded)
        assert (state.status, state.exit_code) == (JobStatus.failed, 137)
        assert "killed by SIGKILL" in (state.message or "")


async def test_output_missing_after_the_job_ran_warns_about_the_shared_folder(
    slurm_cluster: SlurmCluster, submitted: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    # As if job_dir were not shared: the job runs, but its output never shows up here.
    code = "os.remove('output.log'); print('lost')"
    async with open_scheduler(slurm_cluster) as scheduler:
        handle = await submit(scheduler, job_spec(code), submitted)
        await wait_for_status(scheduler, handle, JobStatus.succeeded)
        assert await read_lines(scheduler, handle) == []
    assert "is scheduler.slurm.job_dir on a filesystem shared" in caplog.text


async def test_unknown_job_id_reads_as_lost(slurm_cluster: SlurmCluster) -> None:
    async with open_scheduler(slurm_cluster) as scheduler:
        handle = JobHandle(scheduler="slurm", id="99999999", data={"output": "/nowhere"})
        state = await scheduler.status(handle)
        assert state.status == JobStatus.lost
        assert "no longer knows job 99999999" in (state.message or "")


# ---------------------------------------------------------------------- GPUs and queueing


@contextlib.asynccontextmanager
async def both_gpus_held(
    scheduler: SlurmScheduler, gates: Path, ids: list[str]
) -> AsyncIterator[None]:
    """Two running 1-GPU jobs hold the cluster's two GPUs until the block ends."""
    gate = gates / "release"
    holders = [
        await submit(scheduler, job_spec("wait_for(sys.argv[1])", str(gate), gpus=1), ids)
        for _ in range(2)
    ]
    try:
        for holder in holders:
            await wait_for_status(scheduler, holder, JobStatus.running)
        yield
    finally:
        gate.touch()


async def test_gpu_job_waits_with_its_reason_while_both_gpus_are_held(
    slurm_cluster: SlurmCluster, submitted: list[str], gates: Path
) -> None:
    async with open_scheduler(slurm_cluster) as scheduler:
        async with both_gpus_held(scheduler, gates, submitted):
            third = await submit(scheduler, job_spec("print('ran')", gpus=1), submitted)
            async with asyncio.timeout(TIMEOUT_S):
                # Until Slurm's scheduler has looked at it, a new job has no reason yet.
                while (state := await scheduler.status(third)).message.startswith(UNSCHEDULED):
                    await asyncio.sleep(0.1)
        assert state.status == JobStatus.queued
        assert state.message == "waiting for GPUs (Resources); next in partition debug"
        done = await wait_for_status(scheduler, third, JobStatus.succeeded, JobStatus.failed)
        assert done.status == JobStatus.succeeded


async def test_a_waiting_jobs_place_in_the_queue_moves_as_jobs_ahead_start(
    slurm_cluster: SlurmCluster, submitted: list[str], gates: Path
) -> None:
    """Two GPUs held, two GPU jobs waiting: the second waiter is one job behind the first, and
    next once the first starts (on the GPU the first holder gives back)."""

    def held_by(gate: str) -> JobSpec:
        return job_spec("wait_for(sys.argv[1])", str(gates / gate), gpus=1)

    async def place(handle: JobHandle, wanted: str) -> str:
        async with asyncio.timeout(TIMEOUT_S):  # the place is read again every few seconds
            while not (message := (await scheduler.status(handle)).message or "").endswith(wanted):
                await asyncio.sleep(0.2)
        return message

    async with open_scheduler(slurm_cluster) as scheduler:
        try:
            for holder in [await submit(scheduler, held_by(g), submitted) for g in ("a", "b")]:
                await wait_for_status(scheduler, holder, JobStatus.running)
            first = await submit(scheduler, held_by("c"), submitted)
            second = await submit(scheduler, job_spec("print('ran')", gpus=1), submitted)
            assert (await place(first, "; next in partition debug")).startswith("waiting")
            await place(second, "; 1 job ahead in partition debug")
            (gates / "a").touch()
            await wait_for_status(scheduler, first, JobStatus.running)
            await place(second, "; next in partition debug")
        finally:
            for gate in ("a", "b", "c"):
                (gates / gate).touch()
        done = await wait_for_status(scheduler, second, JobStatus.succeeded, JobStatus.failed)
        assert done.status == JobStatus.succeeded


# ---------------------------------------------------------------------- cancel


async def test_cancel_stops_a_running_job(
    slurm_cluster: SlurmCluster, submitted: list[str], gates: Path
) -> None:
    code = "print('started'); wait_for(sys.argv[1])"
    async with open_scheduler(slurm_cluster) as scheduler:
        handle = await submit(scheduler, job_spec(code, str(gates / "never")), submitted)
        await wait_for_status(scheduler, handle, JobStatus.running)
        await scheduler.cancel(handle)
        state = await wait_for_status(scheduler, handle, JobStatus.cancelled, JobStatus.failed)
        assert state.status == JobStatus.cancelled
        assert "cancelled by j2c" in (state.message or "")


async def test_cancel_kills_a_job_that_ignores_sigterm_after_the_grace(
    slurm_cluster: SlurmCluster, submitted: list[str], gates: Path
) -> None:
    code = """
        signal.signal(signal.SIGTERM, lambda *_: print("ignoring SIGTERM"))
        print("started")
        wait_for(sys.argv[1])
    """
    async with open_scheduler(slurm_cluster, cancel_grace_s=0.5) as scheduler:
        handle = await submit(scheduler, job_spec(code, str(gates / "never")), submitted)
        lines = scheduler.follow_logs(handle)
        assert (await anext(lines)).text == "started"
        await scheduler.cancel(handle)
        rest = [line.text async for line in lines]
        state = await scheduler.status(handle)
        assert state.status == JobStatus.cancelled
        assert "ignoring SIGTERM" in rest


async def test_cancel_removes_a_queued_job(
    slurm_cluster: SlurmCluster, submitted: list[str], gates: Path
) -> None:
    async with open_scheduler(slurm_cluster) as scheduler:
        async with both_gpus_held(scheduler, gates, submitted):
            queued = await submit(scheduler, job_spec("print('ran')", gpus=1), submitted)
            await scheduler.cancel(queued)
            state = await wait_for_status(scheduler, queued, JobStatus.cancelled)
        assert "cancelled by j2c" in (state.message or "")
        assert await read_lines(scheduler, queued) == []


# ---------------------------------------------------------------------- refusals and outages


async def test_more_gpus_than_any_node_has_is_invalid_input_naming_resources(
    slurm_cluster: SlurmCluster,
) -> None:
    async with open_scheduler(slurm_cluster) as scheduler:
        with pytest.raises(InvalidInput) as caught:
            await scheduler.submit(job_spec("print(1)", gpus=4))
    assert caught.value.field == "resources"
    assert "gres=gpu:4" in caught.value.message


async def test_gpu_type_the_cluster_lacks_is_invalid_input(slurm_cluster: SlurmCluster) -> None:
    async with open_scheduler(slurm_cluster) as scheduler:
        with pytest.raises(InvalidInput) as caught:
            await scheduler.submit(job_spec("print(1)", gpus=1, gpu_type="a100"))
    assert "gres=gpu:a100:1" in caught.value.message


async def test_unknown_partition_is_a_config_error_naming_the_key(
    slurm_cluster: SlurmCluster,
) -> None:
    async with open_scheduler(slurm_cluster, partition="nope") as scheduler:
        with pytest.raises(ConfigError) as caught:
            await scheduler.submit(job_spec("print(1)"))
    assert caught.value.field == "scheduler.slurm.partition"


async def test_rejected_token_is_a_scheduler_error_with_a_hint(
    slurm_cluster: SlurmCluster,
) -> None:
    async with open_scheduler(slurm_cluster, token="not-a-jwt") as scheduler:
        with pytest.raises(SchedulerError) as caught:
            await scheduler.status(JobHandle(scheduler="slurm", id="1"))
    assert not isinstance(caught.value, SchedulerUnavailable)
    assert "rejected token" in caught.value.message
    assert "scontrol token" in (caught.value.hint or "")
    assert "not-a-jwt" not in str(caught.value)


async def test_token_file_is_read_again_when_it_changes(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("SLURM_JWT=stale\n")
    settings: dict[str, Any] = {"token": None, "token_file": str(token_file)}
    async with open_scheduler(slurm_cluster, **settings) as scheduler:
        probe = JobHandle(scheduler="slurm", id="99999999")
        with pytest.raises(SchedulerError):
            await scheduler.status(probe)
        token_file.write_text(f"SLURM_JWT={slurm_cluster.token}\n")
        assert (await scheduler.status(probe)).status == JobStatus.lost


async def test_slurmrestd_outage_is_scheduler_unavailable_until_it_is_back(
    slurm_cluster: SlurmCluster, submitted: list[str], gates: Path
) -> None:
    gate = gates / "go"
    async with open_scheduler(slurm_cluster) as scheduler:
        handle = await submit(scheduler, job_spec("wait_for(sys.argv[1])", str(gate)), submitted)
        await wait_for_status(scheduler, handle, JobStatus.running)
        slurm_cluster.stop_restd()
        try:
            with pytest.raises(SchedulerUnavailable) as caught:
                await scheduler.status(handle)
            assert "slurmrestd at" in caught.value.message
            assert "cannot be reached" in caught.value.message
            with pytest.raises(SchedulerUnavailable):
                await read_lines(scheduler, handle)
        finally:
            slurm_cluster.start_restd()
        assert (await scheduler.status(handle)).status == JobStatus.running
        gate.touch()
        state = await wait_for_status(scheduler, handle, JobStatus.succeeded, JobStatus.failed)
        assert state.status == JobStatus.succeeded


# ---------------------------------------------------------------------- through JobService


async def test_example_project_succeeds_through_the_job_service(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    project = tmp_path / "digits"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns(".venv", "outputs"))
    # The job runs on this machine: j2c-unpack and numpy come from this interpreter's venv.
    settings = slurm_cluster.settings(env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"})
    settings = settings.model_copy(update={"data_dir": str(tmp_path / "data")})
    final, lines = await run_job(
        settings,
        JobRequest(
            code_path=str(project),
            call_path=str(project / "train.py"),
            args=["--epochs", "2", "--samples", "200"],
            scheduler="slurm",
        ),
    )
    assert final.status == JobStatus.succeeded, (final.message, lines[-5:])
    assert final.exit_code == 0
    assert any(line.startswith("epoch 2/2") for line in lines)


# ---------------------------------------------------------------------- through the j2c CLI


def test_cli_submit_runs_on_slurm_streams_and_mirrors_the_exit_code(
    slurm_cluster: SlurmCluster, run_j2c: Any, cli_project: Path, cli_venv: Path, tmp_path: Path
) -> None:
    import yaml

    slurm = slurm_cluster.settings().scheduler.slurm
    config = tmp_path / "j2c.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "storage": {"shared": True},  # the node is this machine
                "scheduler": {
                    "default": "slurm",
                    "slurm": {
                        "url": slurm.url,
                        "user": slurm.user,
                        "token": slurm.token,
                        "job_dir": slurm.job_dir,
                        # The job runs on this machine: j2c-unpack comes from this venv.
                        "env": {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},
                    },
                },
            }
        )
    )
    result = run_j2c(
        "submit",
        "train.py",
        "--venv-path",
        str(cli_venv),
        "--config",
        str(config),
        "--",
        "--lines",
        "2",
        "--exit",
        "3",
        cwd=cli_project,
    )
    assert result.returncode == 3, result.stderr[-2000:]
    assert "line 0\nline 1\n" in result.stdout
    listed = run_j2c("list", "--json", "--config", str(config))
    assert [job["scheduler"] for job in json.loads(listed.stdout)] == ["slurm"]
