"""Tenants who share a namespace: a pod that another user makes with the labels and the owner of
someone's Job is not that Job's pod. Against the fake API server (no real one can run here); the
other user creates the pod through the API, as anyone who may create pods in the namespace can.

Before, the backend took the newest pod labelled with the Job's uid: the planted pod's log, exit
code and outputs-index digest became the job's (a failed job read back exit 0 and the other
user's digest, which defeats the verified outputs). Now a pod is the Job's only when it names the
Job as its controller and carries the Job controller's label, and the first one stands for the Job
unless the Job controller itself replaced it.
"""

from __future__ import annotations

import asyncio
import ssl
import tempfile
from pathlib import Path
from typing import Any

import httpx

from j2c_server.schedulers.kubernetes.spec import job_name
from j2c_server.wire.api import JobStatus
from tests.schedulers.test_kubernetes import collect, connect, make_spec
from tests.support.fake_kube import FakeKube

A_DIGEST = "a" * 64
B_DIGEST = "b" * 64


def _planted(job: dict[str, Any], name: str) -> dict[str, Any]:
    """A pod that claims ``job``: its labels and a controlling owner reference to its uid."""
    uid = job["metadata"]["uid"]
    labels = dict(job["spec"]["template"]["metadata"]["labels"])
    assert labels["batch.kubernetes.io/controller-uid"] == uid
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"], "uid": uid}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": labels,
            "ownerReferences": [{**owner, "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": job["spec"]["template"]["spec"],
    }


async def _plant(fake: FakeKube, pod: dict[str, Any]) -> None:
    """The other user creates ``pod`` with their own credentials."""
    fake.tokens.add("tenant-b")
    with tempfile.NamedTemporaryFile(suffix=".pem") as ca:
        ca.write(fake.tls.ca)
        ca.flush()
        context = ssl.create_default_context(cafile=ca.name)
    async with httpx.AsyncClient(verify=context) as client:
        created = await client.post(
            f"{fake.url}/api/v1/namespaces/default/pods",
            json=pod,
            headers={"Authorization": "Bearer tenant-b"},
        )
    assert created.status_code == 201, created.text


async def test_a_pod_planted_beside_the_jobs_own_is_never_read(
    fake_kube: FakeKube, tmp_path: Path
) -> None:
    name = job_name("request-key-1")
    async with connect(fake_kube, tmp_path) as kube:
        handle = await kube.submit(make_spec())
        fake_kube.start(name)
        fake_kube.log(name, "A's line", f"j2c: outputs: index sha256:{A_DIGEST}")
        job = fake_kube.jobs[("default", name)]
        await asyncio.sleep(1.01)  # planted while the job runs: newer than its pod
        await _plant(fake_kube, _planted(job, f"{name}-planted"))
        fake_kube.pod_ends(
            f"{name}-planted", 0, "B's line", f"j2c: outputs: index sha256:{B_DIGEST}"
        )
        running = await kube.status(handle)
        fake_kube.finish(name, 3)

        lines = [line.text for line in await collect(kube.follow_logs(handle))]
        state = await kube.status(handle)
        results = await kube.results(handle)

    assert running.status == JobStatus.running  # not B's finished pod's "succeeded"
    assert lines == ["A's line", f"j2c: outputs: index sha256:{A_DIGEST}"]
    assert state.status == JobStatus.failed and state.exit_code == 3
    assert results.exit_code == 3


async def test_a_pod_with_the_label_alone_is_not_the_jobs(
    fake_kube: FakeKube, tmp_path: Path
) -> None:
    """Before the Job's own pod exists (say, while its image is pulled), a labelled pod without
    the Job as controller is not taken for it."""
    name = job_name("request-key-1")
    async with connect(fake_kube, tmp_path) as kube:
        handle = await kube.submit(make_spec())
        job = fake_kube.jobs[("default", name)]
        pod = _planted(job, f"{name}-labelled")
        pod["metadata"]["ownerReferences"] = []
        await _plant(fake_kube, pod)
        fake_kube.pod_ends(f"{name}-labelled", 0, "B's line")
        fake_kube.call(
            lambda: fake_kube.pods.pop(("default", fake_kube.pod_of(name)["metadata"]["name"]))
        )

        state = await kube.status(handle)

    assert state.status == JobStatus.submitted  # no pod of its own yet
    assert state.exit_code is None


async def test_the_pod_the_job_controller_made_again_is_followed(
    fake_kube: FakeKube, tmp_path: Path
) -> None:
    name = job_name("request-key-1")
    async with connect(fake_kube, tmp_path) as kube:
        handle = await kube.submit(make_spec())
        fake_kube.start(name)
        fake_kube.disrupt_and_retry(name)  # evicted; the controller's new pod runs it again
        fake_kube.start(name)
        fake_kube.log(name, "second attempt")
        fake_kube.finish(name, 0)

        state = await kube.status(handle)
        lines = [line.text for line in await collect(kube.follow_logs(handle))]

    assert state.status == JobStatus.succeeded and state.exit_code == 0
    assert lines == ["second attempt"]
