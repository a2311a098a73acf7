"""The usage record's wire shape (versioned) and how a job's record becomes one.

A record carries what an operator needs to account for a job and nothing of the user's
set-up: the project's folder name (never its path), the entry point relative to the project,
no env values, no args, no messages (a failure message can quote a path or a value). What is
measured comes from the :class:`~j2c_server.wire.api.JobRecord` alone (its stage records and
timestamps), so the process that writes it needs nothing else.
"""

from __future__ import annotations

import time
from pathlib import PurePosixPath
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from j2c_server.wire.api import JobRecord, JobStatus, StageState

USAGE_FORMAT_VERSION = 1
USAGE_PREFIX = "usage"


class ResourcesAsked(BaseModel):
    """What the job asked the scheduler for."""

    model_config = ConfigDict(extra="ignore")

    gpus: int = 0
    gpu_type: str | None = None
    cpus: float | None = None
    memory: str | None = None
    nodes: int = 1
    time_limit_minutes: int | None = None


class StartRecord(BaseModel):
    """Written when the scheduler accepted the job; replaced by the :class:`UsageRecord` at
    its end (same key). A start record alone means the job is running, or that nobody saw it
    end."""

    # Readers ignore fields of a later minor change; ``format_version`` says a breaking one.
    model_config = ConfigDict(extra="ignore")

    kind: Literal["start"] = "start"
    format_version: int = USAGE_FORMAT_VERSION
    job_id: str
    user: str | None = Field(None, description="The Jupyter (hub) user, or the OS user.")
    frontend: str | None = Field(None, description="rest, cli or magic.")
    project: str = Field(..., description="The project folder's name (not its path).")
    entry: str = Field(..., description="The entry point, relative to the project.")
    image: str | None = None
    scheduler: str
    scheduler_job_id: str | None = None
    resources: ResourcesAsked = Field(default_factory=ResourcesAsked)
    created_at: float
    submitted_at: float | None = None
    j2c_version: str
    recorded_at: float


class UsageRecord(StartRecord):
    """A job's account at its end."""

    kind: Literal["end"] = "end"  # type: ignore[assignment]
    status: JobStatus
    exit_code: int | None = None
    failed_stage: str | None = Field(None, description="The stage that failed, if one did.")
    started_at: float | None = Field(None, description="When it started running.")
    finished_at: float | None = None
    queue_wait_s: float | None = Field(None, description="From submitted to running.")
    run_s: float = Field(
        0.0, description="From running to its end; of a resumed job, every attempt's added up."
    )
    gpu_seconds: float = Field(0.0, description="GPUs asked x run time (every attempt's).")
    attempts: int = Field(1, description="How many times it ran (a resumed job: more than 1).")
    preempted: bool = Field(
        False, description="An attempt of it was preempted or lost its node (and it resumed)."
    )
    stages: dict[str, float] = Field(default_factory=dict, description="Seconds per stage.")
    bytes_packed: int = Field(0, description="Layer bytes packed for this job.")
    bytes_reused: int = Field(0, description="Layer bytes reused from the lab's layer cache.")
    bytes_uploaded: int = Field(0, description="Bytes sent to the store.")


AnyRecord = Annotated[StartRecord | UsageRecord, Field(discriminator="kind")]
RECORD_ADAPTER: TypeAdapter[StartRecord | UsageRecord] = TypeAdapter(AnyRecord)


def usage_key(job_id: str, created_at: float) -> str:
    """``usage/YYYY/MM/DD/<job>.json``, dated (UTC) by the job's creation: the start and the
    end record share the key, and a bucket lifecycle rule can expire old days."""
    day = time.strftime("%Y/%m/%d", time.gmtime(created_at))
    return f"{USAGE_PREFIX}/{day}/{job_id}.json"


def _entry(code_path: str, call_path: str) -> str:
    if call_path.startswith("-m "):
        return call_path
    entry, project = PurePosixPath(call_path), PurePosixPath(code_path)
    try:
        return str(entry.relative_to(project))
    except ValueError:
        return entry.name  # never a path outside the project


def _common(record: JobRecord, version: str) -> dict[str, object]:
    request = record.request
    submit = record.stages.get("submit")
    return {
        "job_id": record.id,
        "user": record.user,
        "frontend": record.frontend,
        "project": PurePosixPath(request.code_path).name,
        "entry": _entry(request.code_path, request.call_path),
        "image": record.request.image or _configured_image(record),
        "scheduler": record.scheduler,
        "scheduler_job_id": record.handle.id if record.handle else None,
        "resources": ResourcesAsked(
            gpus=request.resources.gpus,
            gpu_type=request.resources.gpu_type,
            cpus=request.resources.cpus,
            memory=request.resources.memory,
            time_limit_minutes=request.resources.time_limit_minutes,
        ),
        "created_at": record.created_at,
        "submitted_at": submit.finished_at if submit and submit.finished_at else None,
        "j2c_version": version,
        "recorded_at": time.time(),
    }


def _configured_image(record: JobRecord) -> str | None:
    configure = record.stages.get("configure")
    spec = configure.output.get("spec") if configure else None
    image = spec.get("image") if isinstance(spec, dict) else None
    return image if isinstance(image, str) else None


def start_record(record: JobRecord, version: str) -> StartRecord:
    return StartRecord.model_validate(_common(record, version))


def end_record(record: JobRecord, version: str) -> UsageRecord:
    common = _common(record, version)
    submitted = common["submitted_at"]
    started, finished = record.started_at, record.finished_at
    queue_wait = (
        round(started - submitted, 3)
        if isinstance(submitted, int | float) and started is not None
        else None
    )
    run_s = round(finished - started, 3) if started is not None and finished is not None else 0.0
    ran = [a.ended_at - a.started_at for a in record.attempts if a.started_at and a.ended_at]
    if ran:  # each attempt from its start to its end: the gaps between them held no GPU
        run_s = round(sum(ran), 3)
    failed = next(
        (s.stage.value for s in record.stages.values() if s.state == StageState.failed), None
    )
    packed, reused = _layer_bytes(record)
    upload = record.stages.get("upload")
    uploaded = upload.output.get("bytes_uploaded", 0) if upload else 0
    return UsageRecord.model_validate(
        {
            **common,
            "status": record.status,
            "exit_code": record.exit_code,
            "failed_stage": failed,
            "started_at": started,
            "finished_at": finished,
            "queue_wait_s": queue_wait,
            "run_s": max(run_s, 0.0),
            "gpu_seconds": round(record.request.resources.gpus * max(run_s, 0.0), 3),
            "attempts": max(1, len([a for a in record.attempts if a.scheduler_job_id])),
            "preempted": any(attempt.interrupted for attempt in record.attempts),
            "stages": {
                name: stage.seconds
                for name, stage in record.stages.items()
                if stage.seconds is not None
            },
            "bytes_packed": packed,
            "bytes_reused": reused,
            "bytes_uploaded": uploaded if isinstance(uploaded, int) else 0,
        }
    )


def _layer_bytes(record: JobRecord) -> tuple[int, int]:
    pack = record.stages.get("pack")
    layers = pack.output.get("layers", []) if pack else []
    packed = reused = 0
    for layer in layers if isinstance(layers, list) else []:
        size = layer.get("size", 0) if isinstance(layer, dict) else 0
        if not isinstance(size, int):
            continue
        if layer.get("reused"):
            reused += size
        else:
            packed += size
    return packed, reused
