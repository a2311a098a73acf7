"""The Kubernetes backend through the Scheduler interface, against the fake API server.

No real API server can run here (see ``tests/support/fake_kube.py``); the fake speaks the real
batch/v1 and core/v1 JSON over TLS, and each test plays kubelet and Job controller through it.
``test_real_cluster_runs_a_tiny_job`` runs against a real cluster when ``J2C_TEST_KUBECONFIG``
names one.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
from pathlib import Path
from typing import Any

import pytest

from j2c_server.config import J2CSettings
from j2c_server.core.errors import Conflict, InvalidInput, SchedulerError, SchedulerUnavailable
from j2c_server.schedulers import make_scheduler
from j2c_server.schedulers.base import JobSpec, LogLine, Scheduler
from j2c_server.schedulers.kubernetes.backend import KubernetesScheduler
from j2c_server.schedulers.kubernetes.spec import job_name, render_job, render_secret
from j2c_server.wire.api import JobStatus, Resources
from tests.support.fake_kube import FakeKube, write_kubeconfig

IMAGE = "registry.example/ml/pytorch:2.4"


def make_spec(**changes: Any) -> JobSpec:
    fields: dict[str, Any] = {
        "key": "request-key-1",
        "job_id": "j-0001",
        "name": "train resnet",
        "image": IMAGE,
        "command": ["j2c-unpack", "s3://bucket/manifests/sha256/ab.json", "--", "--lr", "0.1"],
        "env": {"J2C_JOB_ID": "j-0001", "WANDB_MODE": "offline"},
        "user": "alice@example.com",
    }
    fields.update(changes)
    return JobSpec(**fields)


def make_settings(**kube: Any) -> J2CSettings:
    return J2CSettings.model_validate({"scheduler": {"kubernetes": kube}})


def connect(fake: FakeKube, tmp_path: Path, **kube: Any) -> KubernetesScheduler:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", fake)
    settings = make_settings(kubeconfig=str(kubeconfig), poll_interval_s=0.02, **kube)
    return KubernetesScheduler(settings, environ={})


def container(job: dict[str, Any]) -> dict[str, Any]:
    return dict(job["spec"]["template"]["spec"]["containers"][0])


async def collect(lines: Any, *, until: int | None = None, timeout: float = 10.0) -> list[LogLine]:
    out: list[LogLine] = []

    async def run() -> None:
        async for line in lines:
            out.append(line)
            if until is not None and len(out) == until:
                return

    await asyncio.wait_for(run(), timeout)
    return out


# --------------------------------------------------------------------------- render


def test_render_limits_cpu_memory_and_gpus_with_equal_requests() -> None:
    spec = make_spec(resources=Resources(gpus=2, cpus=7.5, memory="32G"))
    resources = container(render_job(spec, make_settings()))["resources"]
    assert resources["limits"] == {"cpu": "7500m", "memory": "32G", "nvidia.com/gpu": "2"}
    assert resources["requests"] == resources["limits"]


def test_render_asks_for_no_gpu_when_none_is_requested() -> None:
    resources = container(render_job(make_spec(resources=Resources(cpus=2)), make_settings()))
    assert resources["resources"]["limits"] == {"cpu": "2"}


def test_render_selects_the_gpu_type_by_node_label_and_adds_configured_tolerations() -> None:
    toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    settings = make_settings(node_selector={"pool": "gpu"}, tolerations=[toleration])
    job = render_job(make_spec(resources=Resources(gpus=1, gpu_type="NVIDIA-H100")), settings)
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "gpu", "nvidia.com/gpu.product": "NVIDIA-H100"}
    assert pod["tolerations"] == [toleration]


def test_render_mounts_a_memory_backed_shm_of_the_configured_size() -> None:
    job = render_job(make_spec(), make_settings(shm_size="16Gi"))
    pod = job["spec"]["template"]["spec"]
    assert pod["volumes"] == [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}
    ]
    assert container(job)["volumeMounts"] == [{"name": "dshm", "mountPath": "/dev/shm"}]


def test_render_passes_env_and_takes_credentials_from_the_configured_secret() -> None:
    settings = make_settings(env_from_secret="j2c-storage", service_account="trainer")
    job = render_job(make_spec(), settings)
    main = container(job)
    assert main["env"] == [
        {"name": "J2C_JOB_ID", "value": "j-0001"},
        {"name": "WANDB_MODE", "value": "offline"},
    ]
    assert main["envFrom"] == [{"secretRef": {"name": "j2c-storage"}}]
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == "trainer"


def test_a_credential_reaches_the_job_from_its_own_secret_never_as_a_value() -> None:
    # Requests with credentials are refused for every backend alike (j2c_server.core.job_env); what
    # the operator lets through scheduler.pass_env is the job's Secret's, by reference.
    spec = make_spec(secret_env={"AWS_SECRET_ACCESS_KEY": "from-the-server"})
    job = render_job(spec, make_settings(env_from_secret="j2c-storage"))
    ref = {"secretKeyRef": {"name": job_name(spec.key), "key": "AWS_SECRET_ACCESS_KEY"}}
    assert {"name": "AWS_SECRET_ACCESS_KEY", "valueFrom": ref} in container(job)["env"]
    assert "from-the-server" not in json.dumps(job)
    secret = render_secret(spec, make_settings())
    assert secret is not None and secret["stringData"] == {
        "AWS_SECRET_ACCESS_KEY": "from-the-server"
    }


def test_render_runs_the_image_and_argv_once_without_restarts() -> None:
    job = render_job(make_spec(), make_settings(ttl_seconds_after_finished=600))
    assert container(job)["image"] == IMAGE
    assert container(job)["command"] == make_spec().command
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert job["spec"]["backoffLimit"] == 0
    assert job["spec"]["ttlSecondsAfterFinished"] == 600


def test_render_uses_the_labs_image_when_the_spec_has_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JUPYTER_IMAGE_SPEC", "quay.io/lab/image:7")
    assert container(render_job(make_spec(image=None), make_settings()))["image"] == (
        "quay.io/lab/image:7"
    )


def test_render_without_any_image_names_the_image_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JUPYTER_IMAGE_SPEC", raising=False)
    monkeypatch.delenv("JUPYTER_IMAGE", raising=False)
    with pytest.raises(InvalidInput) as caught:
        render_job(make_spec(image=None), make_settings())
    assert caught.value.field == "image"


def test_render_names_the_job_after_its_key_dns_safe() -> None:
    name = render_job(make_spec(), make_settings())["metadata"]["name"]
    assert name == job_name("request-key-1") == job_name("request-key-1")
    assert name != job_name("request-key-2")
    assert re.fullmatch(r"j2c-[0-9a-f]{20}", name)


def test_render_labels_job_and_pod_with_job_id_key_and_user() -> None:
    job = render_job(make_spec(), make_settings())
    meta = job["metadata"]
    assert meta["labels"]["j2c.io/job-id"] == "j-0001"
    assert meta["labels"]["j2c.io/user"] == "alice-example.com"
    assert meta["annotations"]["j2c.io/key"] == "request-key-1"
    assert job["spec"]["template"]["metadata"]["labels"] == meta["labels"]


def test_render_deadline_is_the_time_limit_capped_by_the_operator() -> None:
    spec = make_spec(resources=Resources(time_limit_minutes=30))
    assert render_job(spec, make_settings())["spec"]["activeDeadlineSeconds"] == 1800
    capped = render_job(spec, make_settings(active_deadline_seconds=600))
    assert capped["spec"]["activeDeadlineSeconds"] == 600
    assert "activeDeadlineSeconds" not in render_job(make_spec(), make_settings())["spec"]


def test_render_refuses_a_gpu_type_that_cannot_be_a_label_value() -> None:
    spec = make_spec(resources=Resources(gpus=1, gpu_type="A100 80GB"))
    with pytest.raises(InvalidInput) as caught:
        render_job(spec, make_settings())
    assert caught.value.field == "resources.gpu_type"


def test_render_is_plain_json() -> None:
    job = render_job(make_spec(resources=Resources(gpus=1, memory="8Gi")), make_settings())
    assert json.loads(json.dumps(job)) == job


# --------------------------------------------------------------------------- submit


def test_scheduler_is_registered_under_kubernetes() -> None:
    scheduler = make_scheduler("kubernetes", make_settings())
    assert isinstance(scheduler, KubernetesScheduler)
    assert isinstance(scheduler, Scheduler)


async def test_submit_creates_the_rendered_job_in_the_namespace(
    fake_kube: FakeKube, tmp_path: Path
) -> None:
    async with connect(fake_kube, tmp_path, namespace="ml") as kube:
        handle = await kube.submit(make_spec())
    created = fake_kube.jobs[("ml", job_name("request-key-1"))]
    assert handle.id == created["metadata"]["name"]
    assert handle.data == {"namespace": "ml", "uid": created["metadata"]["uid"]}
    assert container(created) == container(render_job(make_spec(), make_settings()))


async def test_retried_submit_adopts_the_job_it_created(
    fake_kube: FakeKube, tmp_path: Path
) -> None:
    async with connect(fake_kube, tmp_path) as kube:
        first = await kube.submit(make_spec())
        again = await kube.submit(make_spec())
    assert again == first
    assert len(fake_kube.jobs) == 1
    creates = [r for r in fake_kube.requests if r[0] == "POST"]
    assert len(creates) == 2  # the second create got 409 and adopted


async def test_submit_refuses_a_job_of_the_same_name_made_for_another_request(
    fake_kube: FakeKube, tmp_path: Path
) -> None:
    async with connect(fake_kube, tmp_path) as kube:
        handle = await kube.submit(make_spec())
        fake_kube.call(
            lambda: fake_kube.jobs[("default", handle.id)]["metadata"]["annotations"].update(
                {"j2c.io/key": "someone-else"}
            )
        )
        with pytest.raises(Conflict):
            await kube.submit(make_spec())


async def test_a_job_the_api_server_rejects_is_reported_with_its_message(
    fake_kube: FakeKube, tmp_path: Path
) -> None:
    async with connect(fake_kube, tmp_path) as kube:
        with pytest.raises(SchedulerError) as caught:
            await kube.submit(make_spec(env={"1BAD": "x"}))
    assert "422" in str(caught.value) and "env[].name" in str(caught.value)


# --------------------------------------------------------------------------- status


async def test_new_pod_is_queued_until_scheduled(fake_kube: FakeKube, tmp_path: Path) -> None:
    async with connect(fake_kube, tmp_path) as kube:
        handle = await kube.submit(make_spec())
        state = await kube.status(handle)
    assert state.status == JobStatus.queued
    assert state.message == "waiting for the scheduler to place the pod"


async def test_a_job_without_a_pod_yet_is_submitted(fake_kube: FakeKube, tmp_path: Path) -> None:
    async with connect(fake_kube, tmp_path) as kube:
        handle = await kube.submit(make_spec())
        fake_kube.call(fake_kube.pods.clear)  # the Job controller has not caught up yet
        state = await kube.status(handle)
    assert state.status == JobStatus.submitted
    assert state.message == "waiting for the Job controller to create a pod"


async def test_a_suspended_job_waits_for_admission(fake_kube: FakeKube, tmp_path: Path) -> None:
    fake_kube.suspend_new_jobs = True
    async with connect(fake_kube, tmp_path) as kube:
        state = await kube.status(await kube.submit(make_spec()))
    assert state.status == JobStatus.queued
    assert state.message == "waiting for admission (the Job is suspended)"


async def test_unschedulable_pod_reports_the_schedulers_message(
    fake_kube: FakeKube, tmp_path: Path
) -> None:
    async with connect(fake_kube, tmp_path) as kube:
        handle = await kube.submit(make_spec())
        why = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
        fake_kube.unschedulable(handle.id, why)
        state = await kube.status(handle)
    assert state.status == JobStatus.queued
    assert state.message == f"no node can run it yet: {why}"


async def test_image_pull_failure_names_the_image_and_reason(
    fake_kube: FakeKube, tmp_path: Path
) -> None:
    async with connect(fake_kube, tmp_path) as kube:
        handle = await kube.submit(make_spec())
        fake_kube.waiting(handle.id, "ImagePullBackOff", f'Back-off pulling image "{IMAGE}"')
        state = await kube.status(handle)
    assert state.status == JobStatus.queued
    assert state.message is not None
    assert state.message.startswith(f"cannot pull image {IMAGE} (ImagePullBackOff")


async def test_a_missing_secret_is_named(fake_kube: FakeKube, tmp_path: Path) -> None:
    async with connect(fake_kube, tmp_path, env_from_secret="j2c-storage") as kube:
        handle = await kube.submit(make_spec())
        fake_kube.waiting(handle.id, "CreateContainerConfigError", 'secret "j2c-storage" not found')
        state = await kube.status(handle)
    assert state.status == JobStatus.queued
    assert state.message == (
        'the container cannot be created (CreateContainerConfigError: secret "j2c-storage" '
        "not found)"
    )


async def test_crash_loop_reports_the_last_exit_code(fake_kube: FakeKube, tmp_path: Path) -> None:
    async with connect(fake_kube, tmp_path) as kube:
        handle = await kube.submit(make_spec())
        fake_kube.waiting(handle.id, "CrashLoopBackOff", "back-off 40s", last_exit=2)
        state = await kube.status(handle)
    assert state.status == JobStatus.running
    assert state.message == (
        "the container keeps crashing (last exit code 2): CrashLoopBackOff: back-off 40s"
    )


async def test_running_container_reports_running(fake_kube: FakeKube, tmp_path: Path) -> None:
    async with connect(fake_kube, tmp_path) as kube:
        handle = await kube.submit(make_spec())
        fake_kube.start(handle.id)
        state = await kube.status(handle)
    assert (state.status, state.message) == (JobStatus.running, None)


async def test_failed_job_reports_the_containers_exit_code(
    fake_kube: FakeKube, tmp_path: Path
) -> None:
    async with connect(fake_kube, tmp_path) as kube:
        handle = await kube.submit(make_spec())
        fake_kube.start(handle.id)
        fake_kube.finish(handle.id, 3)
        state = await kube.status(handle)
        results = await kube.results(handle)
    assert (state.status, state.exit_code, results.exit_code) == (JobStatus.failed, 3, 3)
    assert state.message == (
        "BackoffLimitExceeded: Job has reached the specified backoff limit; "
        "the container exited with code 3 (Error)"
    )


async def test_out_of_memory_is_said_in_words(fake_kube: FakeKube, tmp_path: Path) -> None:
    async with connect(fake_kube, tmp_path) as kube:
        handle = await kube.submit(make_spec())
        fake_kube.start(handle.id)
        fake_kube.finish(handle.id, 137, reason="OOMKilled")
        state = await kube.status(handle)
    assert state.exit_code == 137
    assert state.message is not None and "ran out of memory (OOMKilled" in state.message


async def test_deadline_exceeded_fails_timed_out_with_the_reason(
    fake_kube: FakeKube, tmp_path: Path
) -> None:
    async with connect(fake_kube, tmp_path) as kube:
        handle = await kube.submit(make_spec(resources=Resources(time_limit_minutes=30)))
        fake_kube.start(handle.id)
        fake_kube.exceed_deadline(handle.id)
        state = await kube.status(handle)
    assert state.status == JobStatus.failed
    assert state.message == (
        "timed out after 30 min (DeadlineExceeded: Job was active longer than specified deadline)"
    )


async def test_job_removed_behind_our_back_is_lost(fake_kube: FakeKube, tmp_path: Path) -> None:
    async with connect(fake_kube, tmp_path) as kube:
        handle = await kube.submit(make_spec())
        fake_kube.expire(handle.id)
        state = await kube.status(handle)
    assert state.status == JobStatus.lost
    assert state.message is not None and handle.id in state.message


# --------------------------------------------------------------------------- logs


async def test_logs_follow_a_running_pod_until_it_ends(fake_kube: FakeKube, tmp_path: Path) -> None:
    async with connect(fake_kube, tmp_path) as kube:
        handle = await kube.submit(make_spec())
        fake_kube.start(handle.id)
        fake_kube.log(handle.id, "epoch 1", "epoch 2")
        follower = asyncio.ensure_future(collect(kube.follow_logs(handle)))
        await asyncio.sleep(0.2)
        fake_kube.log(handle.id, "epoch 3 done")
        await asyncio.sleep(0.1)
        fake_kube.finish(handle.id, 0)
        lines = await follower
    assert [line.text for line in lines] == ["epoch 1", "epoch 2", "epoch 3 done"]
    assert fake_kube.log_requests[0]["follow"] == "true"
    assert fake_kube.log_requests[0]["timestamps"] == "true"


async def test_logs_wait_for_a_pending_pod_to_start(fake_kube: FakeKube, tmp_path: Path) -> None:
    async with connect(fake_kube, tmp_path) as kube:
        handle = await kube.submit(make_spec())
        follower = asyncio.ensure_future(collect(kube.follow_logs(handle)))
        await asyncio.sleep(0.2)
        assert not follower.done()
        fake_kube.start(handle.id)
        fake_kube.log(handle.id, "hello")
        fake_kube.finish(handle.id, 0)
        lines = await follower
    assert [line.text for line in lines] == ["hello"]


async def test_logs_survive_dropped_streams_without_duplicates_or_gaps(
    fake_kube: FakeKube, tmp_path: Path
) -> None:
    expected = [f"step {i}" for i in range(12)]
    async with connect(fake_kube, tmp_path) as kube:
        handle = await kube.submit(make_spec())
        fake_kube.start(handle.id)
        # Lines sharing one timestamp straddle each cut: the cursor must count them.
        fake_kube.log(handle.id, *expected[:6], same_time=True)
        fake_kube.log(handle.id, *expected[6:])
        fake_kube.drops.extend([4, 3])  # cut after 4 lines, then after 3 more, mid-line
        follower = asyncio.ensure_future(collect(kube.follow_logs(handle)))
        await asyncio.sleep(0.3)
        fake_kube.finish(handle.id, 0)
        lines = await follower
    assert [line.text for line in lines] == expected
    assert len(fake_kube.log_requests) >= 3
    assert "sinceTime" in fake_kube.log_requests[1]


async def test_logs_of_a_finished_pod_survive_a_dropped_read(
    fake_kube: FakeKube, tmp_path: Path
) -> None:
    expected = [f"line {i}" for i in range(5)]
    async with connect(fake_kube, tmp_path) as kube:
        handle = await kube.submit(make_spec())
        fake_kube.start(handle.id)
        fake_kube.log(handle.id, *expected)
        fake_kube.finish(handle.id, 0)
        fake_kube.drops.append(2)
        lines = await collect(kube.follow_logs(handle))
    assert [line.text for line in lines] == expected
    assert [r.get("follow") for r in fake_kube.log_requests] == [None, None]


async def test_logs_resume_from_a_cursor(fake_kube: FakeKube, tmp_path: Path) -> None:
    async with connect(fake_kube, tmp_path) as kube:
        handle = await kube.submit(make_spec())
        fake_kube.start(handle.id)
        fake_kube.log(handle.id, "a", "b", "c", same_time=True)
        fake_kube.log(handle.id, "d", "e")
        fake_kube.finish(handle.id, 0)
        first = await collect(kube.follow_logs(handle), until=2)
        rest = await collect(kube.follow_logs(handle, first[-1].cursor))
    assert [line.text for line in first + rest] == ["a", "b", "c", "d", "e"]


async def test_logs_end_when_the_job_fails_before_its_container_starts(
    fake_kube: FakeKube, tmp_path: Path
) -> None:
    async with connect(fake_kube, tmp_path) as kube:
        handle = await kube.submit(make_spec())
        follower = asyncio.ensure_future(collect(kube.follow_logs(handle)))
        await asyncio.sleep(0.1)
        fake_kube.exceed_deadline(handle.id)
        assert await follower == []


async def test_a_malformed_cursor_names_the_cursor_field(
    fake_kube: FakeKube, tmp_path: Path
) -> None:
    async with connect(fake_kube, tmp_path) as kube:
        handle = await kube.submit(make_spec())
        with pytest.raises(InvalidInput) as caught:
            await collect(kube.follow_logs(handle, "not a cursor"))
    assert caught.value.field == "cursor"


# --------------------------------------------------------------------------- cancel


async def test_cancel_deletes_the_job_in_the_background_and_reads_cancelled(
    fake_kube: FakeKube, tmp_path: Path
) -> None:
    async with connect(fake_kube, tmp_path) as kube:
        handle = await kube.submit(make_spec())
        fake_kube.start(handle.id)
        follower = asyncio.ensure_future(collect(kube.follow_logs(handle)))
        await asyncio.sleep(0.1)
        await kube.cancel(handle)
        state = await kube.status(handle)
        assert await follower == []
    assert state.status == JobStatus.cancelled
    (deleted,) = fake_kube.deletes
    assert deleted["options"]["propagationPolicy"] == "Background"
    assert json.loads(deleted["job"])["metadata"]["annotations"]["j2c.io/cancelled"] == "true"
    assert fake_kube.jobs == {} and fake_kube.pods == {}


async def test_cancel_after_the_job_finished_keeps_its_outcome(
    fake_kube: FakeKube, tmp_path: Path
) -> None:
    async with connect(fake_kube, tmp_path) as kube:
        handle = await kube.submit(make_spec())
        fake_kube.start(handle.id)
        fake_kube.finish(handle.id, 0)
        await kube.cancel(handle)
        state = await kube.status(handle)
    assert state.status == JobStatus.succeeded
    assert fake_kube.deletes == []


# --------------------------------------------------------------------------- errors


async def test_a_rejected_token_is_a_clear_scheduler_error(
    fake_kube: FakeKube, tmp_path: Path
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kc", fake_kube, user={"token": "wrong-token-123"})
    settings = make_settings(kubeconfig=str(kubeconfig))
    async with KubernetesScheduler(settings, environ={}) as kube:
        with pytest.raises(SchedulerError) as caught:
            await kube.submit(make_spec())
    assert "401 Unauthorized" in str(caught.value)
    assert "kubeconfig context 'fake'" in str(caught.value)
    assert "wrong-token-123" not in str(caught.value)
    assert fake_kube.jobs == {}


async def test_an_unreachable_server_is_unavailable_not_failed(
    fake_kube: FakeKube, tmp_path: Path
) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = f"https://127.0.0.1:{port}"
    kubeconfig = write_kubeconfig(tmp_path / "kc", fake_kube, server=server)
    async with KubernetesScheduler(make_settings(kubeconfig=str(kubeconfig)), environ={}) as kube:
        with pytest.raises(SchedulerUnavailable) as caught:
            await kube.submit(make_spec())
    assert server in str(caught.value)


# --------------------------------------------------------------------------- through the server


@pytest.fixture
def kube_by_environment(
    fake_kube: FakeKube, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> FakeKube:
    """Point the Jupyter server's j2c settings at the fake cluster, as an operator would."""
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", fake_kube)
    monkeypatch.setenv("J2C_SCHEDULER__KUBERNETES__KUBECONFIG", str(kubeconfig))
    monkeypatch.setenv("J2C_SCHEDULER__KUBERNETES__POLL_INTERVAL_S", "0.05")
    # The fake cluster's pods run nothing: the embedded file:// store counts as shared.
    monkeypatch.setenv("J2C_STORAGE__SHARED", "true")
    return fake_kube


async def wait_for(check: Any, timeout: float = 60.0) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await check() if asyncio.iscoroutinefunction(check) else check()
        if value:
            return value
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_a_job_submitted_through_the_server_runs_on_the_cluster_and_succeeds(
    kube_by_environment: FakeKube, jp_fetch: Any, jp_root_dir: Path
) -> None:
    fake = kube_by_environment
    project = jp_root_dir / "project"
    project.mkdir()
    (project / "train.py").write_text("print('training')\n")
    body = {
        "code_path": "project",
        "call_path": "train.py",
        "scheduler": "kubernetes",
        "image": IMAGE,
        "resources": {"gpus": 1},
    }
    response = await jp_fetch("j2c", "api", "jobs", method="POST", body=json.dumps(body))
    job_id = json.loads(response.body)["id"]

    def created() -> list[dict[str, Any]]:
        return [
            j
            for j in list(fake.jobs.values())
            if j["metadata"]["labels"]["j2c.io/job-id"] == job_id
        ]

    (job,) = await wait_for(created)
    name = job["metadata"]["name"]
    assert container(job)["command"][0] == "j2c-unpack"
    assert container(job)["resources"]["limits"]["nvidia.com/gpu"] == "1"
    fake.start(name)
    fake.log(name, "hello from the fake cluster")
    fake.finish(name, 0)

    async def finished() -> dict[str, Any] | None:
        record = json.loads((await jp_fetch("j2c", "api", "jobs", job_id)).body)
        return record if record["status"] in ("succeeded", "failed", "lost") else None

    record = await wait_for(finished)
    assert (record["status"], record["exit_code"]) == ("succeeded", 0)
    events = json.loads((await jp_fetch("j2c", "api", "jobs", job_id, "events")).body)
    logs = [e["text"] for e in events if e["kind"] == "log"]
    assert logs == ["hello from the fake cluster"]


# --------------------------------------------------------------------------- real cluster


@pytest.mark.kubernetes
async def test_real_cluster_runs_a_tiny_job(tmp_path: Path) -> None:
    kubeconfig = os.environ.get("J2C_TEST_KUBECONFIG")
    if not kubeconfig:
        pytest.skip("set J2C_TEST_KUBECONFIG to run against a real cluster")
    settings = make_settings(
        kubeconfig=kubeconfig,
        namespace=os.environ.get("J2C_TEST_KUBE_NAMESPACE") or None,
        shm_size="64Mi",
        ttl_seconds_after_finished=120,
        poll_interval_s=1.0,
    )
    image = os.environ.get("J2C_TEST_KUBE_IMAGE", "busybox:1.36")
    spec = make_spec(
        key=f"j2c-test-{os.getpid()}-{tmp_path.name}",
        image=image,
        command=["sh", "-c", "echo hello from j2c; exit 3"],
        env={},
        resources=Resources(cpus=0.1, memory="64Mi", time_limit_minutes=5),
    )
    async with KubernetesScheduler(settings) as kube:
        handle = await kube.submit(spec)
        try:
            lines = await collect(kube.follow_logs(handle), timeout=240)
            for _ in range(60):
                state = await kube.status(handle)
                if state.status.terminal:
                    break
                await asyncio.sleep(1)
        finally:
            await kube.cancel(handle)
    assert [line.text for line in lines] == ["hello from j2c"]
    assert (state.status, state.exit_code) == (JobStatus.failed, 3)
