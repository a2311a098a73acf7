"""A failed job's reason (``jobs/failure.py``), read from its events by their origin: j2c's
error and its hint first, else the job's last exception, else its exit code."""

from __future__ import annotations

from typing import Any

from j2c_server.jobs.failure import job_failure, pipeline_failure
from j2c_server.wire.api import Event, JobRecord, JobRequest, JobStatus

RECORD = JobRecord(
    id="j1",
    name="train.py",
    key="k",
    status=JobStatus.failed,
    request=JobRequest(code_path="/home/u/proj", call_path="/home/u/proj/src/train.py"),
    scheduler="local",
    created_at=0,
    updated_at=0,
)


def _logs(*lines: dict[str, Any]) -> list[Event]:
    return [
        Event.model_validate({"job_id": "j1", "seq": seq, "time": 0.0, "kind": "log", **line})
        for seq, line in enumerate(lines, start=1)
    ]


def _j2c(level: str, phase: str, text: str) -> dict[str, Any]:
    return {"origin": "j2c", "level": level, "phase": phase, "text": text}


def test_j2cs_error_and_its_hint_are_the_reason_and_what_to_do() -> None:
    events = _logs(
        _j2c("info", "running", "python train.py"),
        {"text": "ValueError: not this one"},
        _j2c("error", "notebook", "the notebook runner needs nbclient and ipykernel"),
        _j2c("info", "hint", "install nbclient and ipykernel into the venv"),
        _j2c("info", "summary", "{}"),
    )
    failure = job_failure(RECORD, 71, events)
    assert failure.reason == "the notebook runner needs nbclient and ipykernel"
    assert failure.action == "install nbclient and ipykernel into the venv"
    assert failure.line == "j2c: notebook: the notebook runner needs nbclient and ipykernel"
    assert failure.seq == 3


def test_the_jobs_last_exception_names_the_entry_relative_to_the_project() -> None:
    events = _logs(
        {"text": "Traceback (most recent call last):"},
        {"text": '  File "train.py", line 3'},
        {"text": "torch.cuda.OutOfMemoryError: CUDA out of memory"},
        _j2c("error", "uploading outputs", "uploading outputs failed: store unreachable"),
        {"text": "j2c: failed: a user's line is never j2c's error"},
    )
    failure = job_failure(RECORD, 1, events)
    assert failure.reason == "src/train.py raised torch.cuda.OutOfMemoryError: CUDA out of memory"
    assert failure.seq == 3 and failure.line == "torch.cuda.OutOfMemoryError: CUDA out of memory"


def test_without_either_the_exit_code_or_the_signal_and_the_last_line() -> None:
    failure = job_failure(RECORD, 137, _logs({"text": "epoch 3"}, _j2c("info", "summary", "{}")))
    assert failure.reason == "src/train.py was stopped by SIGKILL (exit code 137)"
    assert (failure.line, failure.seq) == ("epoch 3", 1)
    assert job_failure(RECORD, 2, []).reason == "src/train.py exited with code 2"


def test_a_pipeline_failure_is_its_errors_words() -> None:
    failure = pipeline_failure("call_path: 'x.py' is not a file", "check the entry point")
    assert (failure.reason, failure.action) == (
        "call_path: 'x.py' is not a file",
        "check the entry point",
    )
