"""A sweep on the Kubernetes backend runs as ONE Indexed Job: one POST of one Job
(``completionMode: Indexed``, ``completions`` 6, ``parallelism`` = ``max_parallel``), each child
the handle of its own index, with its own pod's status, log and exit code; cancelling the parent
ends every variant, queued ones included, and leaves nothing running.

No real Kubernetes can run here: the cluster is the FAKE API server of
``tests/support/fake_kube.py``, whose Job controller creates the pods per index (at most
``parallelism`` at once, the next when one ends), and whose pods run nothing: the kubelet is
played by this test (start each pod, write its log, end it). So what this shows truthfully is
the scheduling side: the one Job, its index pods, which pod's log and state reaches which
child, and the cancel; that a pod runs its own variant's row is j2c-unpack's part (the Job's
command line picks the row by ``JOB_COMPLETION_INDEX``, as asserted here; unpack's own tests and
the Slurm array test run it for real).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from j2c_server.config import load_settings
from j2c_server.jobs.service import JobService
from j2c_server.sweeps.hook import job_service
from j2c_server.wire.api import EventKind, JobRequest, JobStatus
from j2c_server.wire.sweep import SweepSpec
from tests.support.fake_kube import FakeKube, write_kubeconfig
from tests.support.jobs import sweep_children_submitted

IMAGE = "registry.example/ml/pytorch:2.4"
GRID = {"lr": ["1e-3", "3e-4", "1e-4"], "seed": ["0", "1"]}
INDEX = "batch.kubernetes.io/job-completion-index"


@pytest.fixture
def service(
    fake_kube: FakeKube, j2c_data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> JobService:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", fake_kube)
    monkeypatch.setenv("J2C_SCHEDULER__KUBERNETES__KUBECONFIG", str(kubeconfig))
    monkeypatch.setenv("J2C_SCHEDULER__KUBERNETES__POLL_INTERVAL_S", "0.05")
    # The fake cluster's pods run nothing: the embedded file:// store counts as shared.
    monkeypatch.setenv("J2C_STORAGE__SHARED", "true")
    return job_service(load_settings())


def _request(project: Path) -> JobRequest:
    project.mkdir()
    (project / "train.py").write_text("print('training')\n")
    return JobRequest(
        code_path=str(project),
        call_path="train.py",
        args=["--lr", "{lr}", "--seed", "{seed}"],
        scheduler="kubernetes",
        image=IMAGE,
        sweep=SweepSpec.model_validate({"grid": GRID, "max_parallel": 2}),
    )


def _jobs(fake: FakeKube) -> list[dict[str, Any]]:
    return fake.call(lambda: [dict(job) for job in fake.jobs.values()])


def _pods(fake: FakeKube) -> list[dict[str, Any]]:
    return fake.call(lambda: list(fake.pods.values()))


class Kubelet:
    """Plays the nodes: starts each pod the Job controller creates, writes one line naming
    the pod to its log and, when ``finish``, ends it with exit code 0. Counts how many of the
    Job's pods run or wait at once."""

    def __init__(self, fake: FakeKube, *, finish: bool) -> None:
        self.fake, self.finish = fake, finish
        self.pod_of_index: dict[int, str] = {}
        self.most_at_once = 0

    async def run(self) -> None:
        while True:
            pods = _pods(self.fake)
            going = [p for p in pods if p["status"]["phase"] in ("Pending", "Running")]
            self.most_at_once = max(self.most_at_once, len(going))
            for pod in going:
                if pod["status"]["phase"] != "Pending":
                    continue
                job = pod["metadata"]["labels"]["job-name"]
                index = int(pod["metadata"]["annotations"][INDEX])
                name = pod["metadata"]["name"]
                with contextlib.suppress(StopIteration, KeyError):  # deleted meanwhile
                    self.fake.start(job, rank=index)
                    self.fake.log(job, f"index {index} runs in pod {name}", rank=index)
                    self.pod_of_index[index] = name
                    if self.finish:
                        await asyncio.sleep(0.1)
                        self.fake.finish(job, 0, rank=index)
            await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def kubelet(fake: FakeKube, *, finish: bool) -> AsyncIterator[Kubelet]:
    player = Kubelet(fake, finish=finish)
    task = asyncio.ensure_future(player.run())
    try:
        yield player
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _log(service: JobService, job_id: str) -> list[str]:
    return [e.text or "" for e in await service.events(job_id) if e.kind == EventKind.log]


async def test_six_variants_run_as_one_indexed_job(
    service: JobService, fake_kube: FakeKube, tmp_path: Path
) -> None:
    try:
        async with kubelet(fake_kube, finish=True) as nodes:
            parent = await service.submit(_request(tmp_path / "proj"))
            children = await sweep_children_submitted(service, parent, 60)
            async with asyncio.timeout(120):
                final = await service.wait(parent.id)
                ended = [await service.wait(c.id) for c in children]
        # ONE Job for the whole sweep, created by one POST.
        posts = [r for r in fake_kube.requests if r[0] == "POST" and r[1].endswith("/jobs")]
        assert len(posts) == 1, posts
        (job,) = _jobs(fake_kube)
        name, body = job["metadata"]["name"], job["spec"]
        assert body["completionMode"] == "Indexed"
        assert (body["completions"], body["parallelism"]) == (6, 2)
        assert body["backoffLimitPerIndex"] == 0
        assert nodes.most_at_once <= 2  # max_parallel, kept by the Job controller
        main = body["template"]["spec"]["containers"][0]
        cut = main["command"].index("--")
        assert main["command"][cut - 2 : cut] == ["--variant-env", "JOB_COMPLETION_INDEX"]
        assert {"name": "J2C_JOB_ID", "value": f"{parent.id}-{{variant}}"} in main["env"]
        # Each child is its own index: its handle, its state, its own pod's log.
        handles = [c.handle for c in children if c.handle is not None]
        assert [h.id for h in handles] == [f"{name}/{i}" for i in range(6)]
        assert final.status == JobStatus.succeeded, final.message
        assert final.sweep is not None and final.sweep.summary == "6/6 succeeded"
        for index, child in enumerate(ended):
            assert (child.status, child.exit_code) == (JobStatus.succeeded, 0), child.message
            pod = nodes.pod_of_index[index]
            assert await _log(service, child.id) == [f"index {index} runs in pod {pod}"]
        assert len(set(nodes.pod_of_index.values())) == 6
    finally:
        await service.stop()


async def test_cancelling_the_parent_ends_all_six_and_nothing_keeps_running(
    service: JobService, fake_kube: FakeKube, tmp_path: Path
) -> None:
    try:
        async with kubelet(fake_kube, finish=False):
            parent = await service.submit(_request(tmp_path / "proj"))
            children = await sweep_children_submitted(service, parent, 60)
            async with asyncio.timeout(60):  # two variants running, four queued
                while [(await service.get(c.id)).status for c in children[:2]] != [
                    JobStatus.running
                ] * 2:
                    await asyncio.sleep(0.1)
            queued = [(await service.get(c.id)).status for c in children[2:]]
            await service.cancel(parent.id)
            async with asyncio.timeout(60):
                ended = [await service.wait(c.id) for c in children]
                final = await service.wait(parent.id)
        assert all(status in (JobStatus.queued, JobStatus.submitted) for status in queued), queued
        assert [c.status for c in ended] == [JobStatus.cancelled] * 6, [
            (c.status, c.message) for c in ended
        ]
        assert final.status == JobStatus.cancelled
        assert final.sweep is not None and final.sweep.summary.startswith("0/6 succeeded")
        # The Job went (its last cancel found only cancelled indexes left) with every pod.
        assert _jobs(fake_kube) == [] and _pods(fake_kube) == []
        assert [d["options"]["propagationPolicy"] for d in fake_kube.deletes] == ["Background"]
    finally:
        await service.stop()
