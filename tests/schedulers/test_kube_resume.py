"""A Kubernetes pod eviction resumes the job as its next attempt, from its last synced checkpoint.

The cluster is the FAKE API server (``tests/support/fake_kube.py``): its pods run nothing, so
this test plays the node. What the job's ``j2c-unpack`` would have done before the eviction is
done with j2c-unpack's own outputs sync (``OutputsSync``: a checkpoint synced into the store,
its index's sha256 in the pod's log); the eviction goes through the API (``POST
.../pods/{name}/eviction``, as ``kubectl drain`` sends it), and the fake's Job controller
applies the Job's ``podFailurePolicy`` as the real one does.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import ssl
from pathlib import Path
from typing import Any

import httpx
import pytest

from j2c_server.config import load_settings
from j2c_server.core.j2c_lines import format_line
from j2c_server.jobs.service import JobService
from j2c_server.schedulers.kubernetes.spec import job_name
from j2c_server.schedulers.kubernetes.status import job_state
from j2c_server.sweeps.hook import job_service
from j2c_server.unpack.checkpoints import CheckpointRules
from j2c_server.unpack.outputs import INDEX_DIGEST_MARK, INDEX_NAME, Caps, OutputsSync, WorkingCopy
from j2c_server.wire.api import JobRecord, JobRequest, JobStatus
from tests.support.fake_kube import GOOD_TOKEN, FakeKube, write_kubeconfig
from tests.support.jobs import settle

IMAGE = "registry.example/ml/pytorch:2.4"


@pytest.fixture
def service(
    fake_kube: FakeKube, j2c_data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> JobService:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", fake_kube)
    monkeypatch.setenv("J2C_SCHEDULER__KUBERNETES__KUBECONFIG", str(kubeconfig))
    monkeypatch.setenv("J2C_SCHEDULER__KUBERNETES__POLL_INTERVAL_S", "0.05")
    monkeypatch.setenv("J2C_STORAGE__SHARED", "true")  # the fake's pods run nothing
    monkeypatch.setenv("J2C_RESUME__BACKOFF_S", "0.2")
    return job_service(load_settings())


def _request(project: Path) -> JobRequest:
    project.mkdir()
    (project / "train.py").write_text("print('training')\n")
    settle(project)
    return JobRequest(
        code_path=str(project), call_path="train.py", scheduler="kubernetes", image=IMAGE
    )


def _job(fake: FakeKube, name: str) -> dict[str, Any] | None:
    return fake.call(lambda: fake.jobs.get(("default", name)))


async def _until_job(fake: FakeKube, name: str, timeout_s: float = 30) -> dict[str, Any]:
    async with asyncio.timeout(timeout_s):
        while (job := _job(fake, name)) is None or not fake.call(
            lambda: [p for p in fake.pods.values() if p["metadata"]["labels"]["job-name"] == name]
        ):
            await asyncio.sleep(0.05)
    return job


async def _until_status(service: JobService, job_id: str, status: JobStatus) -> JobRecord:
    async with asyncio.timeout(30):
        while (record := await service.get(job_id)).status != status:
            await asyncio.sleep(0.05)
    return record


def _synced_checkpoint(tmp_path: Path, output_uri: str, tag: str | None) -> str:
    """What the job's j2c-unpack did before the eviction: ``checkpoints/step_0007`` synced to
    the outputs in the store; the index's sha256 line it printed (``tag``: the job's line tag;
    None: the same words as the job itself could print them)."""
    code = tmp_path / "working-copy"
    (code / "checkpoints").mkdir(parents=True)
    (code / "checkpoints" / "step_0006").write_text("6")
    (code / "checkpoints" / "step_0007").write_text("7")
    settle(code, age_s=5)
    rules = CheckpointRules(("checkpoints",), every_s=1, keep_last=1, max_bytes=10**9)
    outputs = tmp_path / "out"
    outputs.mkdir()
    sync = OutputsSync(
        outputs, output_uri, Caps(1e3, 1e3), WorkingCopy(code, {}), checkpoints=rules
    )
    sync.sync(final=False)
    index = Path(output_uri.removeprefix("file://")) / INDEX_NAME
    digest = hashlib.sha256(index.read_bytes()).hexdigest()
    return format_line(tag, "info", "outputs", f"{INDEX_DIGEST_MARK}{digest}")


def _evict(fake: FakeKube, pod: str) -> None:
    """``kubectl drain``'s request, over the API."""
    context = ssl.create_default_context(cadata=fake.tls.ca.decode())
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod}}
    response = httpx.post(
        f"{fake.url}/api/v1/namespaces/default/pods/{pod}/eviction",
        json=body,
        headers={"Authorization": f"Bearer {GOOD_TOKEN}"},
        verify=context,
    )
    assert response.status_code == 201, response.text


def _pod_name(fake: FakeKube, job: str) -> str:
    return str(fake.call(lambda: fake.pod_of(job))["metadata"]["name"])


def _env(job: dict[str, Any]) -> dict[str, str]:
    container = job["spec"]["template"]["spec"]["containers"][0]
    return {item["name"]: item["value"] for item in container["env"]}


@pytest.mark.parametrize("printed_by", ["j2c", "the job"])
async def test_an_evicted_pod_resumes_from_its_last_checkpoint_as_the_next_attempt(
    service: JobService, fake_kube: FakeKube, tmp_path: Path, printed_by: str
) -> None:
    """The checkpoint is found through j2c's own digest line; the same words printed by the
    job name nothing: the next attempt then starts afresh."""
    service.start()
    try:
        record = await service.submit(_request(tmp_path / "proj"))
        first = job_name(f"j2c-{record.id}")
        job = await _until_job(fake_kube, first)
        assert job["spec"]["podFailurePolicy"]["rules"][0] == {
            "action": "FailJob",
            "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
        }
        command = job["spec"]["template"]["spec"]["containers"][0]["command"]
        output_uri = command[command.index("--output-uri") + 1]
        assert "--checkpoint-dir=checkpoints" in command
        tag = _env(job)["J2C_LINE_TAG"] if printed_by == "j2c" else None
        line = await asyncio.to_thread(_synced_checkpoint, tmp_path, output_uri, tag)
        fake_kube.start(first)
        fake_kube.log(first, "step 7", line)
        await _until_status(service, record.id, JobStatus.running)
        await asyncio.sleep(0.3)  # the watcher has read the log line
        _evict(fake_kube, _pod_name(fake_kube, first))

        second = job_name(f"j2c-{record.id}-a2")
        resumed = await _until_job(fake_kube, second)
        command = resumed["spec"]["template"]["spec"]["containers"][0]["command"]
        assert _env(resumed)["J2C_ATTEMPT"] == "2"
        assert _env(resumed)["J2C_JOB_ID"] == record.id
        if printed_by == "the job":
            assert "--restore" not in command
            return
        plan_uri = command[command.index("--restore") + 1]
        digest = command[command.index("--restore-digest") + 1]
        raw = Path(plan_uri.removeprefix("file://")).read_bytes()
        assert digest == "sha256:" + hashlib.sha256(raw).hexdigest()
        plan = json.loads(raw)
        assert plan["entry"] == "checkpoints/step_0007"
        assert [f["name"] for f in plan["files"]] == ["checkpoints/step_0007"]

        fake_kube.start(second)
        fake_kube.log(second, "resumed at step 8")
        fake_kube.finish(second, 0)
        async with asyncio.timeout(30):
            final = await service.wait(record.id)
        events = await service.events(record.id)
    finally:
        await service.stop()
    assert final.status == JobStatus.succeeded
    assert final.attempt == 2 and final.attempt_words() == "attempt 2 of 4"
    ended, last = final.attempts
    assert ended.interrupted and "DisruptionTarget" in (ended.reason or "")
    assert last.resumed_from == "checkpoints/step_0007" and last.restored_bytes == 1
    assert final.handle is not None and final.handle.id == second
    lines = [e.text or "" for e in events if e.kind.value == "log"]
    assert "resumed at step 8" in lines and "step 7" in lines
    boundary = [e for e in events if e.is_j2c_line and e.phase == "resume"]
    assert [e.level.value if e.level else None for e in boundary] == ["warning"]
    assert (boundary[0].text or "").startswith("attempt 1 of 4 ended: its pod was disrupted")


def test_a_failed_container_or_a_deadline_is_no_disruption() -> None:
    pod = {
        "metadata": {"name": "p", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"nodeName": "n1"},
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {"name": "j2c", "state": {"terminated": {"exitCode": 3, "reason": "Error"}}}
            ],
        },
    }
    failed = {
        "status": {
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                }
            ]
        }
    }
    state = job_state(failed, [pod])
    assert state.status == JobStatus.failed and state.interrupted is None
    late = {
        "spec": {"activeDeadlineSeconds": 60},
        "status": {
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "DeadlineExceeded",
                    "message": "late",
                }
            ]
        },
    }
    assert job_state(late, []).interrupted is None
