"""Multi-node jobs on the Kubernetes backend: an Indexed Job and its headless Service.

There is no real cluster here: the Job controller, kubelet and API server are the FAKE of
``tests/support/fake_kube.py`` (one pod per index, index annotations, podFailurePolicy's FailJob
played by the test). What a real API server would reject is checked another way: every rendered
manifest is read with the official ``kubernetes`` client's models, and must come back unchanged
(a misspelt or misplaced field would be dropped, a wrong type refused).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from j2c_server.schedulers.kubernetes.backend import KubernetesScheduler
from j2c_server.schedulers.kubernetes.spec import job_name, render_job, render_service
from j2c_server.schedulers.multinode import unpack_options
from j2c_server.wire.api import JobStatus, Resources
from tests.schedulers.test_kubernetes import collect, connect, container, make_settings, make_spec
from tests.support.fake_kube import FakeKube

kubernetes = pytest.importorskip("kubernetes")

TWO_NODES = Resources(nodes=2, gpus=4)


def official(data: dict[str, Any], kind: str) -> dict[str, Any]:
    """``data`` read as the client's model ``kind`` and written back as JSON."""
    client = kubernetes.client.ApiClient()

    class Response:
        def __init__(self, body: str) -> None:
            self.data = body

    model = client.deserialize(Response(json.dumps(data)), kind)
    out: dict[str, Any] = client.sanitize_for_serialization(model)
    return out


def test_a_two_node_job_is_an_indexed_job_the_official_models_accept() -> None:
    spec = make_spec(resources=TWO_NODES)
    job = render_job(spec, make_settings())
    assert official(job, "V1Job") == job
    body = job["spec"]
    assert body["completionMode"] == "Indexed"
    assert body["completions"] == body["parallelism"] == 2
    assert body["backoffLimit"] == 0
    # A disruption first (it ends the Job as interrupted: a new attempt resumes it), then any
    # rank's non-zero exit fails the whole Job at once.
    disruption, rule = body["podFailurePolicy"]["rules"]
    assert disruption["onPodConditions"] == [{"type": "DisruptionTarget", "status": "True"}]
    assert rule["action"] == disruption["action"] == "FailJob"
    assert rule["onExitCodes"] == {"containerName": "j2c", "operator": "NotIn", "values": [0]}
    pod = body["template"]["spec"]
    name = job_name(spec.key)
    assert pod["subdomain"] == name
    [spread] = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert (
        spread["labelSelector"]["matchLabels"].items()
        <= body["template"]["metadata"]["labels"].items()
    )
    env = {item["name"]: item["value"] for item in container(job)["env"]}
    assert env["MASTER_ADDR"] == f"{name}-0.{name}"
    assert env["MASTER_PORT"] == "29500"
    # GPUs are per pod, i.e. per node.
    assert container(job)["resources"]["limits"]["nvidia.com/gpu"] == "4"


def test_the_service_is_headless_owned_by_the_job_and_valid() -> None:
    spec = make_spec(resources=TWO_NODES)
    service = render_service(spec, make_settings(), owner_uid="uid-1")
    assert official(service, "V1Service") == service
    assert service["metadata"]["name"] == job_name(spec.key)
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["metadata"]["ownerReferences"][0]["uid"] == "uid-1"


def test_torchrun_finds_rank_0_through_the_rendered_objects() -> None:
    """What torchrun needs on Kubernetes, read off the rendered Job and Service: every pod is
    ``<job>-<index>.<job>`` (hostname from the index, subdomain the headless Service, which
    selects exactly the Job's pods), so rank 0's DNS name is MASTER_ADDR; each pod knows its
    rank from the index; j2c-unpack starts torchrun with a process per GPU of its node."""
    resources = Resources(nodes=2, gpus=4, launcher="torchrun")
    command = ["j2c-unpack", "s3://b/m.json", *unpack_options(resources), "--", "--lr", "1"]
    spec = make_spec(resources=resources, command=command)
    job = render_job(spec, make_settings())
    service = render_service(spec, make_settings(), owner_uid="u")
    name = job_name(spec.key)
    pod = job["spec"]["template"]
    assert pod["spec"]["subdomain"] == service["metadata"]["name"] == name
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    env = {item["name"]: item["value"] for item in container(job)["env"]}
    assert env["MASTER_ADDR"] == f"{name}-0.{name}" and env["MASTER_PORT"] == "29500"
    # The rank is the completion index (Kubernetes sets JOB_COMPLETION_INDEX and the pod's
    # hostname <job>-<index>); torchrun sets RANK, LOCAL_RANK and WORLD_SIZE for its workers.
    assert job["spec"]["completionMode"] == "Indexed"
    assert not {"RANK", "WORLD_SIZE", "LOCAL_RANK"} & env.keys()
    args = [*container(job).get("command", []), *container(job).get("args", [])]
    at = args.index("--nodes")
    assert args[at : at + 6] == ["--nodes", "2", "--launcher", "torchrun", "--nproc-per-node", "4"]


def test_a_one_node_job_stays_a_plain_job() -> None:
    job = render_job(make_spec(), make_settings())
    assert official(job, "V1Job") == job
    assert "completionMode" not in job["spec"]
    assert "subdomain" not in job["spec"]["template"]["spec"]


def test_dry_run_shows_the_job_and_its_service() -> None:
    native = KubernetesScheduler.native_spec(make_spec(resources=TWO_NODES), make_settings())
    assert native is not None
    assert [item["kind"] for item in native["items"]] == ["Job", "Service"]


async def test_submit_creates_the_job_and_its_service(fake_kube: FakeKube, tmp_path: Path) -> None:
    async with connect(fake_kube, tmp_path) as kube:
        handle = await kube.submit(make_spec(resources=TWO_NODES))
        again = await kube.submit(make_spec(resources=TWO_NODES))  # a retry adopts both
    assert again.id == handle.id
    service = fake_kube.services[("default", handle.id)]
    assert service["metadata"]["ownerReferences"][0]["uid"] == handle.data["uid"]
    pods = [p for p in fake_kube.pods.values() if p["metadata"]["labels"]["job-name"] == handle.id]
    assert sorted(p["spec"]["hostname"] for p in pods) == [f"{handle.id}-0", f"{handle.id}-1"]


async def test_running_while_any_rank_runs_and_logs_carry_their_rank(
    fake_kube: FakeKube, tmp_path: Path
) -> None:
    async with connect(fake_kube, tmp_path) as kube:
        handle = await kube.submit(make_spec(resources=TWO_NODES))
        assert (await kube.status(handle)).status == JobStatus.queued
        fake_kube.start(handle.id, rank=1)
        assert (await kube.status(handle)).status == JobStatus.running
        fake_kube.start(handle.id, rank=0)
        fake_kube.log(handle.id, "rank 0: sum 30", rank=0)
        fake_kube.log(handle.id, "rank 1: sum 30", rank=1)
        follower = asyncio.ensure_future(collect(kube.follow_logs(handle)))
        await asyncio.sleep(0.2)
        fake_kube.finish(handle.id, 0, rank=1)
        assert (await kube.status(handle)).status == JobStatus.running  # rank 0 still runs
        fake_kube.log(handle.id, "rank 0 done", rank=0)
        fake_kube.finish(handle.id, 0, rank=0)
        lines = await follower
        state = await kube.status(handle)
        # A watcher restarting from the second line's cursor gets only the lines after it.
        rest = await collect(kube.follow_logs(handle, lines[1].cursor))
    assert sorted((line.rank, line.text) for line in lines) == [
        (0, "rank 0 done"),
        (0, "rank 0: sum 30"),
        (1, "rank 1: sum 30"),
    ]
    assert [line.text for line in rest] == [line.text for line in lines[2:]]
    assert state.status == JobStatus.succeeded and state.exit_code == 0


async def test_one_failed_rank_fails_the_job_with_its_exit_code(
    fake_kube: FakeKube, tmp_path: Path
) -> None:
    async with connect(fake_kube, tmp_path) as kube:
        handle = await kube.submit(make_spec(resources=TWO_NODES))
        fake_kube.start(handle.id, rank=0)
        fake_kube.start(handle.id, rank=1)
        fake_kube.finish(handle.id, 7, rank=1)
        state = await kube.status(handle)
        results = await kube.results(handle)
    assert state.status == JobStatus.failed
    assert state.exit_code == 7 and results.exit_code == 7
    assert state.message is not None and state.message.startswith("rank 1 failed")


async def test_cancel_deletes_the_job_every_pod_and_the_service(
    fake_kube: FakeKube, tmp_path: Path
) -> None:
    async with connect(fake_kube, tmp_path) as kube:
        handle = await kube.submit(make_spec(resources=TWO_NODES))
        fake_kube.start(handle.id, rank=0)
        fake_kube.start(handle.id, rank=1)
        await kube.cancel(handle)
        state = await kube.status(handle)
    assert state.status == JobStatus.cancelled
    assert not [
        p for p in fake_kube.pods.values() if p["metadata"]["labels"]["job-name"] == handle.id
    ]
    assert ("default", handle.id) not in fake_kube.services
    assert any(
        method == "DELETE" and path.endswith(f"/services/{handle.id}")
        for method, path, _ in fake_kube.requests
    )
