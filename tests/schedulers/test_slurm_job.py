"""The Slurm backend's pure parts, without a cluster: what it sends (script, description), how it
reads Slurm's job records, and the configuration and token errors it raises before any request.

Job records here are literal dicts shaped like slurmrestd v0.0.38's answers (as captured from the
real Slurm that ``test_slurm.py`` runs against), for the end states that Slurm cannot be made to
reach on one test machine (node failure, time limit, out of memory).
"""

from __future__ import annotations

import base64
import json
import shlex
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from j2c_server.config import J2CSettings, load_settings
from j2c_server.core.errors import ConfigError, InvalidInput, SchedulerError, SchedulerUnavailable
from j2c_server.schedulers.base import JobSpec
from j2c_server.schedulers.slurm.backend import SlurmScheduler
from j2c_server.schedulers.slurm.job import (
    batch_script,
    comment_fields,
    job_comment,
    job_description,
    memory_mib,
    pyxis_image,
)
from j2c_server.schedulers.slurm.settings import SlurmSettings
from j2c_server.schedulers.slurm.state import job_state
from j2c_server.wire.api import JobHandle, JobStatus, Resources

OUTPUT = Path("/shared/j2c/job-1/output.log")


def spec(**fields: Any) -> JobSpec:
    values: dict[str, Any] = {
        "key": "j2c-job-1",
        "job_id": "job-1",
        "name": "train model",
        "command": ["j2c-unpack", "file:///store/m.json", "--", "--lr", "0.1"],
    }
    values.update(fields)
    return JobSpec(**values)


def settings(**slurm: Any) -> J2CSettings:
    values = {"url": "http://127.0.0.1:1", "job_dir": "/shared/j2c", "token": "t"}
    values.update(slurm)
    return J2CSettings.model_validate({"scheduler": {"slurm": values}})


def jwt(**claims: Any) -> str:
    def part(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    return f"{part({'alg': 'HS256', 'typ': 'JWT'})}.{part(claims)}.signature"


def record(state: str, **fields: Any) -> dict[str, Any]:
    return {
        "job_id": 7,
        "job_state": state,
        "state_reason": "None",
        "state_description": "",
        "exit_code": 0,
        "comment": "j2c job=job-1 key=j2c-job-1",
        **fields,
    }


# ---------------------------------------------------------------------- what is submitted


@pytest.mark.parametrize(
    ("memory", "mib"),
    [("16Gi", 16384), ("512Mi", 512), ("1.5Gi", 1536), ("8G", 7630), ("100M", 96), ("2gib", 2048)],
)
def test_memory_converts_to_mib_rounding_up(memory: str, mib: int) -> None:
    assert memory_mib(memory) == mib


def test_malformed_memory_is_invalid_input_naming_the_field() -> None:
    with pytest.raises(InvalidInput) as caught:
        memory_mib("lots")
    assert caught.value.field == "resources.memory"


def test_resources_map_to_slurm_fields() -> None:
    resources = Resources(gpus=2, gpu_type="h100", cpus=1.5, memory="16Gi", time_limit_minutes=90)
    job = job_description(spec(resources=resources), SlurmSettings(), OUTPUT)
    assert (job["gres"], job["cpus_per_task"], job["memory_per_node"], job["time_limit"]) == (
        "gpu:h100:2",
        2,
        16384,
        90,
    )


def test_gpus_without_a_type_ask_for_any_gpu() -> None:
    job = job_description(spec(resources=Resources(gpus=1)), SlurmSettings(), OUTPUT)
    assert job["gres"] == "gpu:1"


def test_partition_account_and_qos_come_from_settings() -> None:
    slurm = SlurmSettings(partition="gpu", account="ml", qos="high")
    job = job_description(spec(), slurm, OUTPUT)
    assert (job["partition"], job["account"], job["qos"]) == ("gpu", "ml", "high")


def test_output_is_an_absolute_file_in_the_jobs_folder_without_patterns() -> None:
    job = job_description(spec(), SlurmSettings(), OUTPUT)
    assert job["standard_output"] == str(OUTPUT)
    assert job["current_working_directory"] == str(OUTPUT.parent)
    assert "%" not in job["standard_output"]


def test_environment_forces_unbuffered_python_over_the_request() -> None:
    slurm = SlurmSettings(env={"PATH": "/opt/j2c/bin:/usr/bin"})
    job = job_description(spec(env={"PYTHONUNBUFFERED": "0", "SEED": "1"}), slurm, OUTPUT)
    assert job["environment"]["PYTHONUNBUFFERED"] == "1"
    assert job["environment"]["SEED"] == "1"
    assert job["environment"]["PATH"] == "/opt/j2c/bin:/usr/bin"
    assert job["environment"]["J2C_JOB_ID"] == "job-1"


def test_pyxis_jobs_keep_the_images_own_path() -> None:
    job = job_description(spec(), SlurmSettings(container_runtime="pyxis"), OUTPUT)
    assert "PATH" not in job["environment"]


def test_comment_carries_the_key_for_adoption() -> None:
    assert comment_fields(job_comment(spec()))["key"] == "j2c-job-1"
    assert comment_fields("somebody else's comment") == {}


def test_script_execs_the_command_quoted_as_one_argv() -> None:
    argv = ["j2c-unpack", "m.json", "--", "it's", "$HOME", "a b; rm -rf /"]
    script = batch_script(spec(command=argv), SlurmSettings(), OUTPUT.parent)
    exec_line = script.splitlines()[-1]
    assert shlex.split(exec_line) == ["exec", *argv]


def test_pyxis_runs_the_command_in_the_image_through_srun() -> None:
    slurm = SlurmSettings(container_runtime="pyxis")
    script = batch_script(spec(image="nvcr.io/nvidia/pytorch:24.01-py3"), slurm, OUTPUT.parent)
    words = shlex.split(script.splitlines()[-1])
    assert words[:3] == ["exec", "srun", "--ntasks=1"]
    assert "--container-image=nvcr.io#nvidia/pytorch:24.01-py3" in words
    assert words[-5:] == spec().command


def test_pyxis_without_an_image_is_invalid_input_naming_the_image() -> None:
    with pytest.raises(InvalidInput) as caught:
        batch_script(spec(), SlurmSettings(container_runtime="pyxis"), OUTPUT.parent)
    assert caught.value.field == "image"


@pytest.mark.parametrize(
    ("image", "enroot"),
    [
        ("nvcr.io/nvidia/pytorch:24.01-py3", "nvcr.io#nvidia/pytorch:24.01-py3"),
        ("localhost:5000/lab:1", "localhost:5000#lab:1"),
        ("ubuntu:22.04", "ubuntu:22.04"),
        ("library/python:3.11", "library/python:3.11"),
        ("nvcr.io#nvidia/pytorch:24.01-py3", "nvcr.io#nvidia/pytorch:24.01-py3"),
        ("/shared/images/lab.sqsh", "/shared/images/lab.sqsh"),
    ],
)
def test_pyxis_image_names_follow_enroot(image: str, enroot: str) -> None:
    assert pyxis_image(image) == enroot


async def test_job_id_that_could_escape_the_jobs_folder_is_refused() -> None:
    scheduler = SlurmScheduler(settings())
    try:
        with pytest.raises(InvalidInput) as caught:
            await scheduler.submit(spec(job_id="../../etc"))
    finally:
        await scheduler.close()
    assert caught.value.field == "job_id"


# ---------------------------------------------------------------------- reading job records


def test_pending_for_resources_with_gpus_says_waiting_for_gpus() -> None:
    state = job_state(record("PENDING", state_reason="Resources", tres_per_node="gres:gpu:1"))
    assert (state.status, state.message) == (JobStatus.queued, "waiting for GPUs (Resources)")


def test_pending_behind_priority_is_put_in_words() -> None:
    state = job_state(record("PENDING", state_reason="Priority"))
    assert state.message == "waiting behind jobs with higher priority (Priority)"


@pytest.mark.parametrize("state", ["RUNNING", "COMPLETING"])
def test_running_and_completing_are_running(state: str) -> None:
    assert job_state(record(state)).status == JobStatus.running


def test_completed_is_succeeded() -> None:
    assert job_state(record("COMPLETED")).status == JobStatus.succeeded


@pytest.mark.parametrize(
    ("state", "words"),
    [
        ("TIMEOUT", "timed out after 30 min"),
        ("OUT_OF_MEMORY", "ran out of memory"),
        ("NODE_FAIL", "lost its node"),
    ],
)
def test_abnormal_ends_are_failed_with_a_message(state: str, words: str) -> None:
    result = job_state(record(state, time_limit=30, exit_code=9))
    assert result.status == JobStatus.failed
    assert words in (result.message or "")
    assert "killed by SIGKILL" in (result.message or "")


def test_exit_code_is_decoded_from_the_wait_status() -> None:
    assert job_state(record("FAILED", exit_code=3 << 8)).exit_code == 3
    assert job_state(record("FAILED", exit_code=15)).exit_code == 128 + 15


def test_a_job_marked_for_cancel_reads_cancelled_however_it_ended() -> None:
    comment = "j2c job=job-1 key=j2c-job-1 cancel=requested"
    state = job_state(record("FAILED", exit_code=15, comment=comment))
    assert state.status == JobStatus.cancelled
    assert "cancelled by j2c (killed by SIGTERM)" in (state.message or "")


def test_cancelled_in_slurm_is_cancelled() -> None:
    state = job_state(record("CANCELLED", comment=""))
    assert state.status == JobStatus.cancelled
    assert "cancelled in Slurm" in (state.message or "")


# ---------------------------------------------------------------------- configuration and auth


def test_slurm_is_a_registered_backend() -> None:
    from j2c_server.schedulers import scheduler_class, settings_model
    from j2c_server.schedulers.slurm.backend import SlurmScheduler

    assert scheduler_class("slurm") is SlurmScheduler
    assert settings_model("slurm") is SlurmSettings


def test_missing_url_is_a_config_error_naming_the_key() -> None:
    with pytest.raises(ConfigError) as caught:
        SlurmScheduler(settings(url=None))
    assert caught.value.field == "scheduler.slurm.url"


@pytest.mark.parametrize("job_dir", [None, "relative/jobs"])
def test_missing_or_relative_job_dir_is_a_config_error(job_dir: str | None) -> None:
    with pytest.raises(ConfigError) as caught:
        SlurmScheduler(settings(job_dir=job_dir))
    assert caught.value.field == "scheduler.slurm.job_dir"


async def test_no_token_anywhere_is_a_config_error_naming_the_token_file() -> None:
    scheduler = SlurmScheduler(settings(token=None), environ={})
    try:
        with pytest.raises(ConfigError) as caught:
            await scheduler.status(JobHandle(scheduler="slurm", id="1"))
    finally:
        await scheduler.close()
    assert caught.value.field == "scheduler.slurm.token_file"


async def test_expired_token_is_reported_before_any_request() -> None:
    token = jwt(sun="ada", exp=int(time.time()) - 60)
    scheduler = SlurmScheduler(settings(token=None), environ={"SLURM_JWT": token})
    try:
        with pytest.raises(SchedulerError) as caught:
            await scheduler.status(JobHandle(scheduler="slurm", id="1"))
    finally:
        await scheduler.close()
    assert "expired" in caught.value.message
    assert token not in str(caught.value)


async def test_unreachable_slurmrestd_is_scheduler_unavailable() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    token = jwt(sun="ada", exp=int(time.time()) + 600)
    scheduler = SlurmScheduler(settings(url=f"http://127.0.0.1:{port}", token=token))
    try:
        with pytest.raises(SchedulerUnavailable) as caught:
            await scheduler.status(JobHandle(scheduler="slurm", id="1"))
    finally:
        await scheduler.close()
    assert f"slurmrestd at http://127.0.0.1:{port} cannot be reached" in caught.value.message


def test_slurm_up_exports_are_not_mistaken_for_settings() -> None:
    environ = {"J2C_SLURM_URL": "http://127.0.0.1:1", "J2C_SLURM_TOKEN_FILE": "/t"}
    assert load_settings(environ=environ, config_file=Path("/dev/null")).scheduler.slurm.url is None


@pytest.mark.parametrize("state", ["PREEMPTED", "NODE_FAIL", "BOOT_FAIL"])
def test_a_preemption_or_a_lost_node_is_an_interruption(state: str) -> None:
    result = job_state(record(state, exit_code=15, nodes="gpu-3"))
    assert result.status == JobStatus.failed and result.interrupted and result.node == "gpu-3"


@pytest.mark.parametrize("state", ["FAILED", "TIMEOUT", "OUT_OF_MEMORY", "CANCELLED"])
def test_the_jobs_own_end_a_time_limit_or_a_cancel_is_no_interruption(state: str) -> None:
    assert job_state(record(state, exit_code=1 << 8, time_limit=30)).interrupted is None


@pytest.mark.parametrize("state", ["PENDING", "RUNNING"])
def test_a_job_slurm_requeued_reads_lost_and_interrupted(state: str) -> None:
    """slurmrestd drops requeue: false: Slurm would run it again from step 0 (j2c resumes it)."""
    result = job_state(record(state, restart_cnt=1, state_reason="BeginTime", batch_host="j2c"))
    assert result.status == JobStatus.lost and result.interrupted and result.node == "j2c"
    assert job_state(record(state, restart_cnt=0)).interrupted is None
