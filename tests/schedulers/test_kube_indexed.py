"""A sweep on the Kubernetes backend as ONE Indexed Job, each index read as a job of its own.

No real Kubernetes can run here: the API server, Job controller and kubelet are the FAKE of
``tests/support/fake_kube.py`` (pods per index up to ``parallelism``, the index annotation and
label, ``completedIndexes`` / ``failedIndexes``, a deleted pod failing its index). Its pods run
nothing: each test plays the kubelet (start, log lines, exit codes). What a real API server
would reject in the manifest is checked with the official ``kubernetes`` client's models: the
rendered Job must come back from them unchanged.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from j2c_server.core.errors import InvalidInput, SchedulerError
from j2c_server.schedulers.base import ArrayScheduler, JobSpec
from j2c_server.schedulers.kubernetes import indexed as kube_indexed
from j2c_server.schedulers.kubernetes.array import format_indexes, parse_indexes, render_array
from j2c_server.schedulers.kubernetes.backend import KubernetesScheduler
from j2c_server.schedulers.kubernetes.spec import job_name
from j2c_server.wire.api import JobStatus, Resources
from tests.schedulers.test_kube_multinode import official
from tests.schedulers.test_kubernetes import collect, container, make_settings, make_spec
from tests.support.fake_kube import FakeKube, write_kubeconfig

COMMAND = ["j2c-unpack", "s3://b/m.json", "--variant-env", "JOB_COMPLETION_INDEX", "--", "x"]


def sweep_spec(**changes: Any) -> JobSpec:
    fields: dict[str, Any] = {
        "key": "j2c-j-0007",
        "job_id": "j-0007",
        "command": COMMAND,
        "env": {"J2C_JOB_ID": "j-0007-{variant}"},
    }
    return make_spec(**{**fields, **changes})


@pytest.fixture
def fresh_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every read of the Job goes to the API server (the tests change it between reads)."""
    monkeypatch.setattr(kube_indexed, "ARRAY_REFRESH_S", 0.0)


def connect(fake: FakeKube, tmp_path: Path, poll_interval_s: float = 0.02) -> KubernetesScheduler:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", fake)
    settings = make_settings(kubeconfig=str(kubeconfig), poll_interval_s=poll_interval_s)
    return KubernetesScheduler(settings, environ={})


def pods_of(fake: FakeKube, name: str) -> dict[int, dict[str, Any]]:
    """The Job's pods by index, read on the fake's own thread."""

    def read() -> dict[int, dict[str, Any]]:
        index = "batch.kubernetes.io/job-completion-index"
        return {
            int(p["metadata"]["annotations"][index]): p
            for p in fake.pods.values()
            if p["metadata"]["labels"].get("job-name") == name
        }

    return fake.call(read)


def job_posts(fake: FakeKube) -> int:
    return sum(1 for verb, path, _ in fake.requests if verb == "POST" and path.endswith("/jobs"))


# --------------------------------------------------------------------------- render


def test_a_sweep_is_one_indexed_job_the_official_models_accept() -> None:
    job = render_array(sweep_spec(), make_settings(), 6, 2)
    assert official(job, "V1Job") == job
    body = job["spec"]
    assert body["completionMode"] == "Indexed"
    assert (body["completions"], body["parallelism"]) == (6, 2)
    assert body["backoffLimitPerIndex"] == 0
    # Each index fails at most once: a failed variant never ends the others early.
    assert body["backoffLimit"] == 6
    assert "podFailurePolicy" not in body  # that is a multi-node Job's (one rank fails all)
    pod = body["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert "subdomain" not in pod and "affinity" not in pod
    assert container(job)["command"] == COMMAND
    assert {"name": "J2C_JOB_ID", "value": "j-0007-{variant}"} in container(job)["env"]
    assert job["metadata"]["name"] == job_name("j2c-j-0007")


@pytest.mark.parametrize(("max_parallel", "parallelism"), [(None, 6), (10, 6), (1, 1)])
def test_parallelism_is_max_parallel_at_most_the_size(
    max_parallel: int | None, parallelism: int
) -> None:
    job = render_array(sweep_spec(), make_settings(), 6, max_parallel)
    assert job["spec"]["parallelism"] == parallelism


def test_multi_node_variants_are_refused() -> None:
    with pytest.raises(InvalidInput) as caught:
        render_array(sweep_spec(resources=Resources(nodes=2)), make_settings(), 6, 2)
    assert caught.value.field == "resources.nodes"
    assert "2 nodes per variant" in caught.value.message


def test_index_sets_read_and_write_the_controllers_format() -> None:
    assert parse_indexes("0-2,5,7-8") == {0, 1, 2, 5, 7, 8}
    assert parse_indexes("") == parse_indexes(None) == set()
    assert format_indexes({8, 0, 1, 2, 5, 7}) == "0-2,5,7-8"
    assert format_indexes(set()) == ""


def test_kubernetes_declares_arrays_and_its_index_variable() -> None:
    assert KubernetesScheduler.capabilities.arrays
    assert KubernetesScheduler.array_index_env == "JOB_COMPLETION_INDEX"
    assert isinstance(KubernetesScheduler(make_settings(), environ={}), ArrayScheduler)


# --------------------------------------------------------------------------- submit


async def test_submit_array_makes_one_job_and_a_handle_per_index(
    fake_kube: FakeKube, tmp_path: Path, fresh_reads: None
) -> None:
    async with connect(fake_kube, tmp_path) as kube:
        handles = await kube.submit_array(sweep_spec(), 6, 2)
        again = await kube.submit_array(sweep_spec(), 6, 2)  # a retry adopts the Job
        states = [await kube.status(h) for h in handles]
    name = job_name("j2c-j-0007")
    assert [h.id for h in handles] == [f"{name}/{i}" for i in range(6)]
    assert [h.model_dump() for h in again] == [h.model_dump() for h in handles]
    assert {h.data["array"] for h in handles} == {name}
    assert [h.data["index"] for h in handles] == list(range(6))
    assert len(fake_kube.jobs) == 1 and job_posts(fake_kube) == 2  # the second one got 409
    assert sorted(pods_of(fake_kube, name)) == [0, 1]  # parallelism 2
    assert [s.status for s in states] == [JobStatus.queued] * 6
    assert states[2].message == (
        "waiting for a free slot: at most 2 of the sweep's 6 variants run at once"
    )


async def test_an_api_server_that_drops_backoff_limit_per_index_is_refused(
    fake_kube: FakeKube, tmp_path: Path
) -> None:
    fake_kube.drop_job_fields = {"backoffLimitPerIndex"}  # as Kubernetes before 1.29 does
    async with connect(fake_kube, tmp_path) as kube:
        with pytest.raises(SchedulerError) as caught:
            await kube.submit_array(sweep_spec(), 3, None)
    assert "backoffLimitPerIndex" in str(caught.value) and "1.29" in str(caught.value)
    assert fake_kube.jobs == {} and fake_kube.pods == {}


# --------------------------------------------------------------------------- one index


async def test_each_index_has_its_own_state_exit_code_and_log(
    fake_kube: FakeKube, tmp_path: Path, fresh_reads: None
) -> None:
    async with connect(fake_kube, tmp_path) as kube:
        handles = await kube.submit_array(sweep_spec(), 3, 2)
        name = handles[0].data["array"]
        fake_kube.start(name, rank=0)
        fake_kube.log(name, "variant 0 says hi", rank=0)
        fake_kube.start(name, rank=1)
        fake_kube.log(name, "variant 1 says hi", rank=1)
        assert (await kube.status(handles[0])).status == JobStatus.running
        assert (await kube.status(handles[2])).status == JobStatus.queued
        follower = asyncio.ensure_future(collect(kube.follow_logs(handles[1])))
        fake_kube.finish(name, 3, rank=1)  # one variant fails: the others go on
        failed = await kube.status(handles[1])
        assert (await kube.status(handles[0])).status == JobStatus.running
        assert sorted(pods_of(fake_kube, name)) == [0, 1, 2]  # its slot went to index 2
        fake_kube.start(name, rank=2)
        fake_kube.log(name, "variant 2 says hi", rank=2)
        fake_kube.finish(name, 0, rank=2)
        fake_kube.finish(name, 0, rank=0)
        states = [await kube.status(h) for h in handles]
        results = [await kube.results(h) for h in handles]
        logs = [await collect(kube.follow_logs(h)) for h in (handles[0], handles[2])]
        followed = await follower
    assert (failed.status, failed.exit_code) == (JobStatus.failed, 3)
    assert failed.message == "index 1 of the Job failed: the container exited with code 3 (Error)"
    assert [(s.status, s.exit_code) for s in states] == [
        (JobStatus.succeeded, 0),
        (JobStatus.failed, 3),
        (JobStatus.succeeded, 0),
    ]
    assert [r.exit_code for r in results] == [0, 3, 0]
    assert [line.text for line in followed] == ["variant 1 says hi"]
    assert [[line.text for line in lines] for lines in logs] == [
        ["variant 0 says hi"],
        ["variant 2 says hi"],
    ]


async def test_the_indexes_share_one_read_of_the_job(fake_kube: FakeKube, tmp_path: Path) -> None:
    async with connect(fake_kube, tmp_path, poll_interval_s=2.0) as kube:
        handles = await kube.submit_array(sweep_spec(), 6, 6)
        before = len(fake_kube.requests)
        for handle in handles:
            await kube.status(handle)
    reads = [path for _, path, _ in fake_kube.requests[before:]]
    assert len(reads) == 2, reads  # the Job and its pod list, once for all six


# --------------------------------------------------------------------------- cancel


async def test_cancelling_a_running_index_deletes_only_its_pod(
    fake_kube: FakeKube, tmp_path: Path, fresh_reads: None
) -> None:
    async with connect(fake_kube, tmp_path) as kube:
        handles = await kube.submit_array(sweep_spec(), 3, 2)
        name = handles[0].data["array"]
        fake_kube.start(name, rank=0)
        fake_kube.start(name, rank=1)
        pod_0 = pods_of(fake_kube, name)[0]["metadata"]["name"]
        await kube.cancel(handles[0])
        cancelled = await kube.status(handles[0])
        others = [await kube.status(h) for h in handles[1:]]
        follow = await collect(kube.follow_logs(handles[0]))  # ends: its pod is gone
    assert fake_kube.pod_deletes == [pod_0]
    assert cancelled.status == JobStatus.cancelled
    assert [s.status for s in others] == [JobStatus.running, JobStatus.queued]
    job = fake_kube.jobs[("default", name)]
    assert job["metadata"]["annotations"]["j2c.io/cancelled-indexes"] == "0"
    assert job["status"]["failedIndexes"] == "0"  # backoffLimitPerIndex 0: never retried
    assert follow == []


async def test_a_cancelled_queued_index_never_runs_and_the_others_do(
    fake_kube: FakeKube, tmp_path: Path, fresh_reads: None
) -> None:
    async with connect(fake_kube, tmp_path) as kube:
        handles = await kube.submit_array(sweep_spec(), 3, 1)
        name = handles[0].data["array"]
        fake_kube.start(name, rank=0)
        await kube.cancel(handles[1])  # no pod yet: Kubernetes cannot be told to skip it
        waiting = await kube.status(handles[1])
        fake_kube.finish(name, 0, rank=0)  # the controller gives index 1 the free slot
        assert 1 in pods_of(fake_kube, name)
        settled = await kube.status(handles[1])  # this read deletes that pod
        index_2 = await kube.status(handles[2])
    assert waiting.status == JobStatus.cancelling
    assert waiting.message is not None and "cancelled before it started" in waiting.message
    assert settled.status == JobStatus.cancelled
    assert len(fake_kube.pod_deletes) == 1 and fake_kube.pod_deletes[0].startswith(f"{name}-1-")
    assert sorted(pods_of(fake_kube, name)) == [0, 2]  # index 2 runs as it should
    assert index_2.status == JobStatus.queued


async def test_once_only_cancelled_indexes_are_left_the_job_is_deleted(
    fake_kube: FakeKube, tmp_path: Path, fresh_reads: None
) -> None:
    async with connect(fake_kube, tmp_path) as kube:
        handles = await kube.submit_array(sweep_spec(), 4, 2)
        name = handles[0].data["array"]
        fake_kube.start(name, rank=0)
        fake_kube.finish(name, 0, rank=0)  # index 0 succeeded before the cancel
        fake_kube.start(name, rank=1)
        for handle in handles:  # what cancelling the sweep's parent does
            await kube.cancel(handle)
        states = [await kube.status(h) for h in handles]
        results = await kube.results(handles[0])
    assert ("default", name) not in fake_kube.jobs
    assert pods_of(fake_kube, name) == {}  # nothing keeps running
    assert [d["options"]["propagationPolicy"] for d in fake_kube.deletes] == ["Background"]
    assert [s.status for s in states] == [JobStatus.succeeded] + [JobStatus.cancelled] * 3
    assert results.exit_code == 0  # its outcome stays readable after the Job is gone


async def test_a_cancel_guards_the_annotation_with_the_resource_version(
    fake_kube: FakeKube, tmp_path: Path, fresh_reads: None
) -> None:
    async with connect(fake_kube, tmp_path) as kube:
        handles = await kube.submit_array(sweep_spec(), 3, 3)
        name = handles[0].data["array"]
        real_get = kube._get_job
        raced = False

        async def get_then_race(namespace: str, job: str) -> dict[str, Any] | None:
            nonlocal raced
            found = await real_get(namespace, job)
            if not raced:  # another j2c process records index 2 meanwhile
                raced = True

                def other() -> None:
                    record = fake_kube.jobs[("default", name)]
                    record["metadata"]["annotations"]["j2c.io/cancelled-indexes"] = "2"
                    version = int(record["metadata"]["resourceVersion"]) + 1
                    record["metadata"]["resourceVersion"] = str(version)

                fake_kube.call(other)
            return found

        kube._get_job = get_then_race  # type: ignore[method-assign]
        await kube.cancel(handles[0])
    annotations = fake_kube.jobs[("default", name)]["metadata"]["annotations"]
    assert annotations["j2c.io/cancelled-indexes"] == "0,2"


async def test_a_deleted_job_reads_lost_unless_it_was_cancelled(
    fake_kube: FakeKube, tmp_path: Path, fresh_reads: None
) -> None:
    async with connect(fake_kube, tmp_path) as kube:
        handles = await kube.submit_array(sweep_spec(), 2, 2)
        fake_kube.expire(handles[0].data["array"])
        state = await kube.status(handles[0])
    assert state.status == JobStatus.lost
    assert state.message is not None and handles[0].data["array"] in state.message
