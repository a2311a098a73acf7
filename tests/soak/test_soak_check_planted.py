"""The chaos soak's checker (benchmarks/soak_check.py) against planted violations: a run's
observations as the soak collects them, clean, then with one violation planted at a time. Each
planted violation must be reported, and only it; the clean run must pass (else every planted
test would pass for the wrong reason).

The engines' part is planted on the real engines: a container that carries j2c's labels for
one of the server's jobs, and a held Slurm job whose j2c comment names one, neither recorded as
any job's handle, must be found by ``soak_legs.py``'s label and comment search; a process that
carries a job's id must be found by the soak's ``/proc`` scan.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from tests.support.podman import Podman
from tests.support.slurm import SlurmCluster

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name: str) -> ModuleType:
    """A benchmark module by its path (benchmarks/ is no package; it imports its siblings)."""
    if name in sys.modules:
        return sys.modules[name]
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


sc = _load("soak_check")


def _events(job_id: str, tag: str, lines: list[int], status: str) -> list[dict[str, Any]]:
    """A job's events as the server keeps them: queued, running, its log lines, its end."""
    kinds = [("status", None, "queued"), ("status", None, "running")]
    kinds += [("log", f"{tag} line {i}", None) for i in lines]
    kinds += [("status", None, status)]
    return [
        {"job_id": job_id, "seq": seq, "kind": kind, "text": text, "status": state}
        for seq, (kind, text, state) in enumerate(kinds, start=1)
    ]


class Run:
    """A small clean run: one send of each kind, plus one whose unpack was killed and one
    that met the full disk; every job's record, events, viewer and usage record consistent."""

    def __init__(self) -> None:
        self.sends: list[Any] = []
        self.jobs: list[dict[str, Any]] = []
        self.events: dict[str, list[dict[str, Any]]] = {}
        self.usage: list[tuple[str, dict[str, Any]]] = []
        # index, kind, printed, (job id, status, exit code, lines in its log, message)...
        self.add(0, "ok", 5, ("j0", "succeeded", 0, 5, None))
        self.add(1, "fail", 3, ("j1", "failed", 3, 3, "exit code 3"))
        self.add(2, "cancel", 10, ("j2", "cancelled", None, 7, None))
        self.add(3, "resend", 4, ("j3", "succeeded", 0, 4, None))
        self.add(4, "edit", 6, ("j4", "succeeded", 0, 6, None), ("j4b", "succeeded", 0, 6, None))
        self.add(5, "ok", 8, ("j5", "failed", 137, 2, "j2c-unpack was killed"))
        self.sends[-1].killed.add("j5")
        message = "writing the job's log: [Errno 28] No space left on device"
        self.add(6, "ok", 9, ("j6", "failed", 1, 4, message))
        self.sends[-1].crowded = True
        self.sends[3].resend_id = "j3"
        self.sends[4].edited_id = "j4b"
        self.sends[4].answered.append("j4b")

    def add(self, index: int, kind: str, printed: int, *jobs: tuple[Any, ...]) -> None:
        send = sc.SendSeen(index, kind, printed, "local")
        send.first_id = jobs[0][0]
        send.answered.append(jobs[0][0])
        self.sends.append(send)
        for job_id, status, exit_code, logged, message in jobs:
            self.add_job(send, job_id, status, exit_code, list(range(logged)), message)

    def add_job(
        self,
        send: Any,
        job_id: str,
        status: str,
        exit_code: int | None,
        lines: list[int],
        message: str | None = None,
    ) -> None:
        events = _events(job_id, send.tag, lines, status)
        self.events[job_id] = events
        args = ["ok", str(send.lines), "20.0", send.tag]
        self.jobs.append(
            {
                "id": job_id,
                "status": status,
                "exit_code": exit_code,
                "message": message,
                "scheduler": send.backend,
                "request": {"args": args, "scheduler": send.backend},
                "last_seq": len(events),
            }
        )
        record = {"kind": "end", "job_id": job_id, "status": status}
        self.usage.append((f"usage/2026/12/05/{job_id}.json", record))

    def observed(self, **changes: Any) -> Any:
        viewers = [sc.ViewerSeen(j, copy.deepcopy(e)) for j, e in self.events.items()]
        values: dict[str, Any] = {
            "sends": self.sends,
            "jobs": self.jobs,
            "events": self.events,
            "viewers": viewers,
            "usage": self.usage,
            "processes": [],
            "unreadable": [],
            "engine_left": [],
            "disk_full": True,
        }
        values.update(changes)
        return sc.Observed(**values)

    def job(self, job_id: str) -> dict[str, Any]:
        return next(job for job in self.jobs if job["id"] == job_id)


@pytest.fixture
def run() -> Run:
    return Run()


def only(problems: list[str], *words: str) -> str:
    """The one problem reported, which names all of ``words``."""
    assert len(problems) == 1, problems
    assert all(word in problems[0] for word in words), problems
    return problems[0]


def test_the_clean_run_passes_so_each_planted_violation_is_what_is_reported(run: Run) -> None:
    assert sc.check(run.observed()) == []


def test_planted_second_job_of_a_retried_post_is_reported(run: Run) -> None:
    """The POST was retried across a server kill and the server made a second job: the client
    was answered only the first id, the server's list holds both."""
    run.add_job(run.sends[0], "j0-again", "succeeded", 0, list(range(5)))
    only(sc.check(run.observed()), "send 0 (ok)", "2 jobs on the server, not 1", "j0-again")


def test_planted_resend_that_did_not_attach_is_reported(run: Run) -> None:
    run.sends[3].resend_id = "j3-other"
    run.sends[3].answered.append("j3-other")
    run.add_job(run.sends[3], "j3-other", "succeeded", 0, list(range(4)))
    problems = sc.check(run.observed())
    assert any("2 jobs on the server, not 1" in p for p in problems), problems
    assert any("the unchanged re-send got j3-other, not the first job j3" in p for p in problems)


def test_a_resend_after_its_first_job_was_killed_and_failed_may_run_again(run: Run) -> None:
    """Not a violation: the re-send of a job that failed (its j2c-unpack killed) runs again."""
    first = run.job("j3")
    first["status"], first["exit_code"], first["message"] = "failed", 137, "killed by SIGKILL"
    run.events["j3"][-1]["status"] = "failed"
    run.usage[[r["job_id"] for _, r in run.usage].index("j3")][1]["status"] = "failed"
    run.sends[3].killed.add("j3")
    run.sends[3].resend_id = "j3-again"
    run.sends[3].answered.append("j3-again")
    run.add_job(run.sends[3], "j3-again", "succeeded", 0, list(range(4)))
    assert sc.check(run.observed()) == []
    # Had the first one been left running or succeeded, a second job would still be reported.
    first["status"] = "succeeded"
    assert any("2 jobs on the server" in p for p in sc.check(run.observed()))


def _plant_log(run: Run, job_id: str, lines: list[int]) -> Run:
    """``job_id``'s log (and so every viewer's copy) holds ``lines``."""
    send = next(s for s in run.sends if job_id in s.answered)
    job = run.job(job_id)
    run.events[job_id] = _events(job_id, send.tag, lines, job["status"])
    job["last_seq"] = len(run.events[job_id])
    return run


def test_planted_doubled_log_line_is_reported(run: Run) -> None:
    """A line sent twice after a restart (the watcher re-read from an old offset)."""
    _plant_log(run, "j0", [0, 1, 2, 3, 3, 4])
    only(sc.check(run.observed()), "j0", "doubled [3]")


def test_planted_skipped_log_line_is_reported(run: Run) -> None:
    _plant_log(run, "j0", [0, 1, 3, 4])
    only(sc.check(run.observed()), "j0", "missing [2]")


def test_planted_skipped_line_of_a_job_cut_short_is_reported(run: Run) -> None:
    """A killed job may end early (a prefix of its lines), never with a hole in them."""
    _plant_log(run, "j5", [0, 2])
    only(sc.check(run.observed()), "j5", "missing [1]")


def test_planted_lost_last_lines_of_a_finished_job_are_reported(run: Run) -> None:
    _plant_log(run, "j0", [0, 1, 2])
    only(sc.check(run.observed()), "j0", "3 of the 5 lines it printed")


def test_planted_line_of_another_job_is_reported(run: Run) -> None:
    run.events["j3"][3]["text"] = "send-0 line 1"
    problems = sc.check(run.observed())
    assert any("a line of send-0 in its log" in p for p in problems), problems


def test_planted_viewer_that_missed_an_event_is_reported(run: Run) -> None:
    observed = run.observed()
    del observed.viewers[0].events[3]
    only(sc.check(observed), "viewer of j0", "not 1..8 once")


def test_planted_viewer_text_other_than_the_stored_is_reported(run: Run) -> None:
    observed = run.observed()
    observed.viewers[0].events[3]["text"] = "send-0 line 9"
    only(sc.check(observed), "viewer of j0", "event 4 is not what the server stored")


def test_planted_duplicate_usage_record_is_reported(run: Run) -> None:
    """The same job accounted twice (a set of job ids would hold it once)."""
    run.usage.append(("usage/2026/12/06/j0.json", {"kind": "end", "job_id": "j0"}))
    run.usage[-1][1]["status"] = "succeeded"
    only(sc.check(run.observed()), "2 usage records of job j0")


def test_planted_missing_and_wrong_usage_records_are_reported(run: Run) -> None:
    run.usage = [(key, record) for key, record in run.usage if record["job_id"] != "j1"]
    run.usage[0][1]["status"] = "failed"
    problems = sc.check(run.observed())
    assert any("no usage record of 1 jobs: ['j1']" in p for p in problems), problems
    assert any("end failed, the job succeeded" in p for p in problems), problems
    assert len(problems) == 2, problems


def test_planted_unrelated_failure_during_the_disk_fill_is_reported(run: Run) -> None:
    """A job under way while the disk was full may fail for the disk, not for anything else."""
    job = run.job("j6")
    job["message"], job["exit_code"] = "ModuleNotFoundError: No module named 'numpy'", 1
    only(sc.check(run.observed()), "j6 failed while the disk was full, but not for the disk")


def test_planted_refusal_during_the_disk_fill_that_is_not_the_disk_is_reported(run: Run) -> None:
    refused = [
        '507 j2c/api/jobs: {"code": "disk_full", "message": "the disk ... is full"}',
        '500 j2c/api/jobs: {"message": "Unhandled error"}',
    ]
    only(sc.check(run.observed(refused=refused)), "does not say the disk is full", "500")


def test_planted_succeeded_job_that_was_killed_is_reported(run: Run) -> None:
    job = run.job("j5")
    job["status"], job["exit_code"] = "succeeded", 0
    run.usage[[r["job_id"] for _, r in run.usage].index("j5")][1]["status"] = "succeeded"
    _plant_log(run, "j5", list(range(8)))
    only(sc.check(run.observed()), "j5 succeeded, not ['failed', 'lost']")


def _resumed(run: Run, first: list[int], second: list[int]) -> Run:
    """j5 (its j2c-unpack killed) resumed as attempt 2 and succeeded: its log is attempt 1's
    lines, j2c's boundary line, attempt 2's lines from line 0 again."""
    job = run.job("j5")
    job["status"], job["exit_code"], job["attempt"] = "succeeded", 0, 2
    run.usage[[r["job_id"] for _, r in run.usage].index("j5")][1]["status"] = "succeeded"
    events = _events("j5", "send-5", first + second, "succeeded")
    boundary = {
        "job_id": "j5",
        "kind": "log",
        "origin": "j2c",
        "phase": "resume",
        "text": "attempt 1 of 4 ended: its runner j2c-unpack was killed (SIGKILL)",
        "data": {"attempt": {"ended": 1, "next": 2, "of": 4}},
    }
    events.insert(2 + len(first), boundary)
    for seq, event in enumerate(events, start=1):
        event["seq"] = seq
    run.events["j5"] = events
    job["last_seq"] = len(events)
    return run


def test_a_killed_job_that_resumed_and_ran_to_its_end_passes(run: Run) -> None:
    """Not a violation: the kill was an interruption; attempt 2 printed every line anew."""
    assert sc.check(_resumed(run, [0, 1, 2], list(range(8))).observed()) == []


def test_planted_doubled_line_within_a_resumed_attempt_is_reported(run: Run) -> None:
    problems = sc.check(_resumed(run, [0, 1, 2], [0, 1, 2, 2, 3, 4, 5, 6, 7]).observed())
    only(problems, "j5", "of attempt 2", "doubled [2]")


def test_planted_resumed_job_that_lost_its_last_lines_is_reported(run: Run) -> None:
    only(sc.check(_resumed(run, [0, 1, 2], [0, 1, 2, 3]).observed()), "j5", "4 of the 8")


def test_planted_job_of_no_send_is_reported(run: Run) -> None:
    stray = sc.SendSeen(99, "ok", 1, "local")
    run.add_job(stray, "stray", "succeeded", 0, [0])
    problems = sc.check(run.observed())
    assert any("job stray belongs to no send" in p for p in problems), problems


# The engines' and the machine's part: found where they really are.


def test_planted_process_left_with_a_jobs_id_is_found_and_reported(run: Run) -> None:
    soak = _load("soak")
    job_id = f"planted-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "J2C_JOB_ID": job_id}
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    try:
        time.sleep(0.2)
        found, unreadable = soak.job_processes({job_id, "j0"})
        assert [(pid, job) for pid, job, _ in found] == [(child.pid, job_id)]
        assert unreadable == []  # every process that could carry a job's id was read
        only(sc.check(run.observed(processes=found)), "process left", job_id)
    finally:
        child.kill()
        child.wait()


def _engine(podman: Podman) -> httpx.Client:
    transport = httpx.HTTPTransport(uds=podman.socket)
    return httpx.Client(transport=transport, base_url="http://engine/v1.41", timeout=60)


@pytest.fixture
def planted_container(podman: Podman) -> Iterator[tuple[str, str]]:
    """A created (never started) container of the platform image with the labels j2c gives a
    job's container, for a job id of its own and another server's runs label; removed after."""
    from j2c_server.schedulers.container.lifecycle import LABEL_RUNS
    from j2c_server.schedulers.container.spec import LABEL_JOB_ID, LABEL_MANAGED_BY

    job_id = f"planted-{uuid.uuid4().hex[:8]}"
    labels = {LABEL_MANAGED_BY: "j2c", LABEL_JOB_ID: job_id, LABEL_RUNS: "0" * 16}
    body = {"Image": podman.image, "Cmd": ["true"], "Labels": labels}
    with _engine(podman) as engine:
        made = engine.post("/containers/create", params={"name": job_id}, json=body)
        assert made.status_code == 201, made.text
        try:
            yield job_id, made.json()["Id"]
        finally:
            engine.delete(f"/containers/{made.json()['Id']}", params={"force": "1"})


def test_planted_leftover_container_is_found_by_its_labels_and_reported(
    run: Run, podman: Podman, planted_container: tuple[str, str], tmp_path: Path
) -> None:
    """No handle names it: the container leg finds it by j2c's labels alone, for a job of the
    server's list, and not for a job id the server does not list."""
    legs = _load("soak_legs")
    job_id, _ = planted_container
    saved = dict(os.environ)  # the leg exports the server's settings: not for later tests
    os.environ.update({"J2C_SCHEDULER__CONTAINER__SOCKET": podman.socket})
    os.environ["PLATFORM_IMAGE"] = podman.image
    try:
        leg = legs.ContainerLeg(tmp_path, tmp_path / "data")
    finally:
        os.environ.clear()
        os.environ.update(saved)
    left = leg.leftovers({job_id, "j0"})
    assert left == [f"container {job_id} of job {job_id} (created)"]
    assert leg.leftovers({"j0"}) == []  # another server's job: not this run's
    only(sc.check(run.observed(engine_left=left)), "left on the engine", job_id)


@pytest.mark.slurm
def test_planted_leftover_slurm_job_is_found_by_its_comment_and_reported(
    run: Run, slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A held Slurm job whose j2c comment names one of the server's jobs, its id recorded
    nowhere: found in the controller's queue by the comment."""
    legs = _load("soak_legs")
    job_id = f"planted-{uuid.uuid4().hex[:8]}"
    headers = {"X-SLURM-USER-NAME": slurm_cluster.user, "X-SLURM-USER-TOKEN": slurm_cluster.token}
    job = {
        "name": "j2c-planted",
        "comment": f"j2c job={job_id} key=planted",
        "environment": {"PATH": "/usr/bin:/bin"},
        "current_working_directory": str(slurm_cluster.job_dir),
        "standard_output": "/dev/null",
        "hold": True,
    }
    script = "#!/bin/bash\ntrue\n"
    answer = httpx.post(
        f"{slurm_cluster.url}/slurm/v0.0.38/job/submit",
        headers=headers,
        json={"job": job, "script": script},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    slurm_id = str(answer.json()["job_id"])
    try:
        monkeypatch.setenv("J2C_SCHEDULER__SLURM__URL", slurm_cluster.url)
        monkeypatch.setenv("J2C_SCHEDULER__SLURM__USER", slurm_cluster.user)
        monkeypatch.setenv("J2C_SCHEDULER__SLURM__TOKEN", slurm_cluster.token)
        leg = legs.SlurmLeg.__new__(legs.SlurmLeg)  # its settings exported above: no start
        left = leg.leftovers({job_id, "j0"})
        assert len(left) == 1 and f"Slurm job {slurm_id} " in left[0], left
        assert job_id in left[0] and "PENDING" in left[0], left
        assert leg.leftovers({"j0"}) == []
        only(sc.check(run.observed(engine_left=left)), "left on the engine", slurm_id)
    finally:
        httpx.delete(
            f"{slurm_cluster.url}/slurm/v0.0.38/job/{slurm_id}", headers=headers, timeout=30
        )
