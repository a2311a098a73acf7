"""Pydantic models at every boundary: requests, manifests, job records and events.

These are the wire shapes shared by the REST API, the websocket stream, the CLI's ``--json``
output, the registry and ``j2c-unpack``. The TypeScript types in ``src/models.ts`` are generated
from their JSON schema (``python -m j2c_server.server.schema_export``) and a test checks they agree.

This module imports only pydantic, the standard library and ``manifest_plan`` (the manifest's
pydantic-free copy ``j2c-unpack`` runs on, which holds ``LayerRole``). It stays one module, over
400 lines, on purpose: it is the whole wire contract and the one source the TypeScript types
are generated from, so a change of a shape and of every shape that holds it is one reviewable
diff.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_validator

from j2c_server.wire.manifest import LayerRole, Strict
from j2c_server.wire.sweep import SweepInfo, SweepSpec

_MEMORY_RE = re.compile(r"^\d+(\.\d+)?([KMGT]i?|[kmgt])?[Bb]?$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Caps on what a request puts on the job's command line and in its environment, well inside the
# kernel's (128 KiB per string, ~2 MiB for argv and environment together).
MAX_ENV_ENTRIES = 256
MAX_ENV_NAME = 256
MAX_ENV_VALUE_BYTES = 32 * 1024
MAX_ENV_TOTAL_BYTES = 256 * 1024
MAX_ARGS = 1024
MAX_ARG_BYTES = 32 * 1024
MAX_ARGS_TOTAL_BYTES = 256 * 1024
MAX_NODES = 256
MAX_RESUMES = 100
MAX_CHECKPOINT_DIRS = 16


def is_checkpoint_dir(folder: str) -> bool:
    """A checkpoint folder names a folder inside the job's working directory: relative, no
    empty, '.' or '..' segment (a trailing '/' allowed)."""
    text = folder.strip()
    parts = text.rstrip("/").split("/")
    return (
        bool(text.rstrip("/"))
        and not text.startswith("/")
        and "\\" not in text
        and "\x00" not in text
        and not any(part in ("", ".", "..") for part in parts)
    )


def checkpoint_dirs(value: list[str]) -> list[str]:
    """Checkpoint folders as given (a request's, a setting's), each checked and without its
    trailing '/'; ValueError names the first that is not inside the working directory."""
    for folder in value:
        if not is_checkpoint_dir(folder):
            raise ValueError(
                f"{folder!r} is not a folder inside the working directory (a relative path "
                "without '..', e.g. 'checkpoints')"
            )
    return [folder.strip().rstrip("/") for folder in value]


def _capped(limit: int, what: str) -> AfterValidator:
    def check(value: str) -> str:
        if len(value.encode()) > limit:
            raise ValueError(f"{what} is longer than {limit // 1024} KiB")
        return value

    return AfterValidator(check)


def _total_bytes(parts: list[str]) -> int:
    return sum(len(part.encode()) for part in parts)


# --------------------------------------------------------------------------- statuses


class JobStatus(str, Enum):
    """One status vocabulary for every scheduler backend and every front end."""

    pending = "pending"
    packing = "packing"
    uploading = "uploading"
    submitted = "submitted"
    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    cancelling = "cancelling"
    cancelled = "cancelled"
    lost = "lost"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATUSES


TERMINAL_STATUSES = frozenset(
    {JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled, JobStatus.lost}
)


class Stage(str, Enum):
    """The pipeline's stages, in order."""

    scan = "scan"
    pack = "pack"
    upload = "upload"
    configure = "configure"
    submit = "submit"
    watch = "watch"
    results = "results"


class StageState(str, Enum):
    """Where a stage stands: the one vocabulary of stage events, stage records, the CLI and UI."""

    started = "started"
    finished = "finished"
    reused = "reused"
    failed = "failed"


# Stage records written before StageState: the same states under their old names.
_LEGACY_STAGE_STATES = {"running": StageState.started, "done": StageState.finished}


# --------------------------------------------------------------------------- requests


class Resources(Strict):
    """What the job asks the scheduler for."""

    gpus: int = Field(0, ge=0, le=64, description="Number of GPUs.")
    cpus: float | None = Field(None, gt=0, le=1024, description="CPU cores.")
    memory: str | None = Field(None, description="Memory, e.g. '16Gi' or '8G'.")
    gpu_type: str | None = Field(None, description="GPU model, where the cluster offers several.")
    time_limit_minutes: int | None = Field(None, gt=0, description="Wall-clock limit.")
    nodes: int = Field(
        1, ge=1, le=MAX_NODES, description="Nodes (ranks); GPUs, CPUs and memory are per node."
    )
    launcher: Literal["none", "torchrun"] = Field(
        "none",
        description="'none': the entry point runs once per node; 'torchrun': j2c starts "
        "torchrun for it on every node.",
    )

    @field_validator("memory")
    @classmethod
    def _memory_format(cls, value: str | None) -> str | None:
        if value is not None and not _MEMORY_RE.match(value.strip()):
            raise ValueError("memory must look like '16Gi', '8G' or '512Mi'")
        return value.strip() if value is not None else None


class JobRequest(Strict):
    """What a user asks for: the same fields from the UI, the magic, the CLI and REST.

    Paths are relative to the server's root directory when they come from the browser; the CLI
    and magic pass absolute paths.
    """

    code_path: str = Field(..., min_length=1, description="Project folder to ship.")
    call_path: str = Field(
        ...,
        min_length=1,
        description="Entry point: a .py script or .ipynb notebook inside the project, "
        "or '-m package.module'.",
    )
    venv_path: str | None = Field(None, description="Virtual environment to ship.")
    args: list[Annotated[str, _capped(MAX_ARG_BYTES, "an argument")]] = Field(
        default_factory=list,
        max_length=MAX_ARGS,
        description="Arguments for the entry point.",
    )
    env: dict[str, Annotated[str, _capped(MAX_ENV_VALUE_BYTES, "a value")]] = Field(
        default_factory=dict,
        max_length=MAX_ENV_ENTRIES,
        description="Extra environment variables.",
    )
    image: str | None = Field(None, description="Container image; default: the lab's image.")
    resources: Resources = Field(default_factory=Resources)
    scheduler: str | None = Field(None, description="Scheduler backend; default from config.")
    compression_level: int | None = Field(None, ge=1, le=22)
    excludes: list[str] = Field(default_factory=list, description="Extra gitignore patterns.")
    includes: list[str] = Field(
        default_factory=list, description="Paths excluded as secrets that the user opts back in."
    )
    name: str | None = Field(None, max_length=200, description="Display name.")
    new: bool = Field(
        False, description="Force a new run instead of attaching to an identical one."
    )
    ship_base: bool | None = Field(
        None,
        description="Ship the lab-base distributions the image lacks (default: "
        "pack.ship_base_packages).",
    )
    base_conflicts: Literal["auto", "ship", "image"] | None = Field(
        None,
        description="A needed lab-base distribution the image has at another version: ship "
        "the lab's, use the image's, or auto (default: pack.base_conflicts).",
    )
    force_base: bool = Field(
        False,
        description="Ship even where a shipped version fails a requirement of the image's own "
        "distributions.",
    )
    allow_missing_imports: bool = Field(
        False,
        description="Send even when the entry's code imports what neither the venv, the lab's "
        "base nor the image provides (refused before upload otherwise).",
    )
    sweep: SweepSpec | None = Field(
        None, description="Send N variants of this job at once (docs/sweeps.md)."
    )
    max_attempts: int | None = Field(
        None,
        ge=0,
        le=MAX_RESUMES,
        description="New attempts after a preemption or a lost node, each resumed from the last "
        "synced checkpoint (0: none; default: resume.max_attempts).",
    )
    checkpoint_dirs: list[str] | None = Field(
        None,
        max_length=MAX_CHECKPOINT_DIRS,
        description="Folders (relative to the working directory) synced while the job runs and "
        "restored when it resumes (default: resume.checkpoint_dirs).",
    )

    @field_validator("checkpoint_dirs")
    @classmethod
    def _checkpoint_dirs(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else checkpoint_dirs(value)

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if len(key) > MAX_ENV_NAME:
                raise ValueError(f"a variable name is longer than {MAX_ENV_NAME} characters")
            if not _ENV_NAME_RE.match(key):
                raise ValueError(f"environment variable name {key!r} is not valid")
        total = _total_bytes([*value, *value.values()])
        if total > MAX_ENV_TOTAL_BYTES:
            raise ValueError(
                f"names and values add up to {total} bytes, more than "
                f"{MAX_ENV_TOTAL_BYTES // 1024} KiB"
            )
        return value

    @field_validator("args")
    @classmethod
    def _args_total(cls, value: list[str]) -> list[str]:
        total = _total_bytes(value)
        if total > MAX_ARGS_TOTAL_BYTES:
            raise ValueError(
                f"the arguments add up to {total} bytes, more than "
                f"{MAX_ARGS_TOTAL_BYTES // 1024} KiB"
            )
        return value


# --------------------------------------------------------------------------- manifest


# --------------------------------------------------------------------------- jobs and events


class StageRecord(Strict):
    """What one stage did last time, so the next run can reuse it or explain why it cannot."""

    stage: Stage
    key: str = Field(..., description="Hash of the stage's inputs.")
    state: StageState
    started_at: float
    finished_at: float | None = None
    seconds: float | None = None
    reason: str | None = Field(None, description="Why it ran again or was reused.")
    output: dict[str, Any] = Field(default_factory=dict)

    @field_validator("state", mode="before")
    @classmethod
    def _legacy_state(cls, value: Any) -> Any:
        return _LEGACY_STAGE_STATES.get(value, value) if isinstance(value, str) else value


class Artifact(Strict):
    name: str
    size: int | None = None
    url: str | None = None
    sha256: str | None = Field(None, description="Hex digest, from the job's outputs index.")


class OutputFailure(Strict):
    """One output the job wrote but could not upload, and why."""

    name: str
    error: str


class TrackingRun(Strict):
    """The MLflow run j2c created for the job, as the results show it."""

    run_id: str
    experiment_id: str
    url: str = Field(..., description="The run's page on the tracking server.")
    status: str | None = Field(None, description="MLflow's status: FINISHED, FAILED, KILLED…")
    artifact_uri: str | None = None
    metrics: dict[str, float] = Field(
        default_factory=dict, description="Each metric's latest value."
    )
    error: str | None = Field(None, description="Why the run could not be read or closed.")


class ArtifactCopy(Strict):
    """POST /jobs/{id}/artifacts/{name}/copy: where the copy is, relative to the server's root."""

    path: str


class ArtifactsCopy(Strict):
    """POST /jobs/{id}/copy-artifacts: every artifact copied into the project ("Copy all"):
    the folder they went to, each copy's path (relative to the server's root) and the ones
    not copied, each with why. A failed file never stops the others."""

    folder: str
    copied: list[str] = Field(default_factory=list)
    failed: list[OutputFailure] = Field(default_factory=list)


class JobResults(Strict):
    exit_code: int | None = None
    artifacts: list[Artifact] = Field(default_factory=list)
    executed_notebook: str | None = None
    output_uri: str | None = None
    outputs_note: str | None = Field(
        None, description="E.g. 'no outputs', or which outputs failed to upload and why."
    )
    failed_outputs: list[OutputFailure] = Field(default_factory=list)
    left_out_outputs: list[OutputFailure] = Field(
        default_factory=list,
        description="Outputs not uploaded by rule (a cap, a secret), largest first, and why.",
    )
    tracking: TrackingRun | None = None


class JobHandle(Strict):
    """A scheduler's own reference to a submitted job; opaque outside its backend."""

    scheduler: str
    id: str
    data: dict[str, Any] = Field(default_factory=dict)


class FileChange(Strict):
    """One path that differs between a send and the job it was compared with."""

    layer: LayerRole
    path: str
    change: Literal["added", "removed", "changed"]


class SendDecision(Strict):
    """Why a send attached to an existing job or made a new one, in words and in data."""

    attached: bool = Field(..., description="The send showed an existing job instead of a new.")
    previous_job: str | None = Field(None, description="The job this send was compared with.")
    changed_files: int = Field(0, description="Files added, removed or changed since then.")
    changes: list[FileChange] = Field(
        default_factory=list, description="The first changed paths (at most 20)."
    )
    changed_settings: list[str] = Field(
        default_factory=list, description="Request fields that differ, e.g. 'args'."
    )
    message: str = Field(..., description="E.g. 'nothing changed since job X: showing it'.")


class AttemptRecord(Strict):
    """One run of a job on its scheduler. A job whose run ended by a preemption or a lost node
    runs again as its next attempt (same id, same manifest), resumed from its last synced
    checkpoint; the user's code failing, a cancel or a time limit end the job."""

    number: int = Field(..., ge=1)
    scheduler_job_id: str | None = Field(None, description="The scheduler's id of this run.")
    submitted_at: float | None = None
    started_at: float | None = Field(None, description="When it started running.")
    ended_at: float | None = None
    status: JobStatus | None = Field(None, description="How it ended (failed, lost...).")
    reason: str | None = Field(
        None, description="Why it ended, e.g. 'preempted (Slurm state PREEMPTED)'."
    )
    interrupted: bool = Field(
        False, description="It ended through no fault of its code (preempted, node lost)."
    )
    node: str | None = Field(None, description="Where it ran, when the scheduler says.")
    resumed_from: str | None = Field(
        None, description="The checkpoint it was restored from (its path in the working copy)."
    )
    resumed_saved_at: float | None = Field(None, description="When that checkpoint was saved.")
    restored_bytes: int = Field(0, description="Checkpoint bytes restored before it started.")
    starts_at: float | None = Field(
        None, description="When it is submitted (after the backoff that follows a preemption)."
    )
    restore_key: str | None = Field(
        None, description="Its restore plan in the store (jobs/<id>/attempts/<n>/restore.json)."
    )
    restore_digest: str | None = Field(None, description="That plan's sha256:<hex>.")


class JobFailure(Strict):
    """Why a job failed, in one sentence its user acts on: what every front end shows first."""

    reason: str = Field(
        ...,
        description="What went wrong, in the user's words (e.g. 'the notebook runner needs "
        "nbclient and ipykernel, and the venv has neither').",
    )
    action: str | None = Field(None, description="What to do about it.")
    line: str | None = Field(
        None, description="The log line it was read from, as the job's log shows it."
    )
    seq: int | None = Field(None, description="That line's event number in the job's stream.")


class JobRecord(Strict):
    """One job as the registry and every front end see it."""

    id: str
    name: str
    key: str = Field(
        ...,
        description="Hash of the request and of the content it ships: a send with both "
        "unchanged attaches to the job.",
    )
    request_key: str | None = Field(None, description="Hash of the request's settings alone.")
    content: dict[str, str] = Field(
        default_factory=dict,
        description="Per layer role, the stat fingerprint of what the send found to ship.",
    )
    decision: SendDecision | None = Field(
        None, description="How the send that answered with this record was decided."
    )
    status: JobStatus
    message: str | None = Field(None, description="Human-readable detail, e.g. a pending reason.")
    request: JobRequest
    scheduler: str
    created_at: float
    updated_at: float
    started_at: float | None = None
    finished_at: float | None = None
    manifest_uri: str | None = None
    handle: JobHandle | None = None
    stages: dict[str, StageRecord] = Field(default_factory=dict)
    exit_code: int | None = None
    results: JobResults | None = None
    last_seq: int = 0
    user: str | None = Field(
        None,
        description="Who sent it: the Jupyter user (the hub user behind JupyterHub), or the "
        "OS user for the CLI and %j2c.",
    )
    frontend: str | None = Field(None, description="Where it was sent from: rest, cli, magic.")
    sweep: SweepInfo | None = Field(None, description="Its sweep: a parent or one variant.")
    attempt: int = Field(
        1, ge=1, description="The attempt running now, or the last one (see attempts)."
    )
    attempts_allowed: int | None = Field(
        None,
        description="Attempts the job may have in all: 1 + its max_attempts (resumes after a "
        "preemption or lost node).",
    )
    attempts: list[AttemptRecord] = Field(
        default_factory=list, description="Each attempt: when, where, how it ended, resumed from."
    )

    def attempt_words(self) -> str | None:
        """``attempt 2 of 4`` once a job has run more than once (None before)."""
        if self.attempt <= 1:
            return None
        allowed = f" of {self.attempts_allowed}" if self.attempts_allowed else ""
        return f"attempt {self.attempt}{allowed}"

    failure: JobFailure | None = Field(
        None, description="Of a failed job: why, in one sentence, and what to do."
    )

    def is_parent(self) -> bool:
        """A sweep's parent: its children run the variants; it packs and uploads once."""
        return self.sweep is not None and self.sweep.parent is None

    def is_child(self) -> bool:
        """One variant of a sweep: its parent submits it."""
        return self.sweep is not None and self.sweep.parent is not None


class EventKind(str, Enum):
    stage = "stage"
    progress = "progress"
    status = "status"
    log = "log"
    result = "result"
    error = "error"


class LineOrigin(str, Enum):
    """Whose a log line is. Told at ingest by a per-job tag j2c's writers carry (the watch
    stage, core/j2c_lines.py), never by how the line starts."""

    job = "job"
    j2c = "j2c"


class LineLevel(str, Enum):
    info = "info"
    warning = "warning"
    error = "error"


class Event(Strict):
    """One entry of a job's ordered event stream; ``seq`` is per job, starting at 1."""

    job_id: str
    seq: int = Field(..., ge=1)
    time: float
    kind: EventKind
    stage: Stage | None = None
    state: StageState | None = Field(None, description="For stage events.")
    status: JobStatus | None = Field(None, description="For status events.")
    stream: Literal["stdout", "stderr"] | None = Field(
        None,
        description="For log events: the stream the engine says the line was written to; "
        "absent where the engine merges the two (docs/pipeline.md).",
    )
    origin: LineOrigin = Field(
        LineOrigin.job,
        description="For log events: whose line it is: 'job' (the job's own output; also "
        "when absent) or 'j2c' (j2c-unpack's steps in the job, the server's notes about it).",
    )
    level: LineLevel | None = Field(None, description="For j2c's log lines.")
    phase: str | None = Field(
        None,
        description="For j2c's log lines: the step that wrote it (j2c-unpack's 'downloading', "
        "'running', ...; the server's 'tracking').",
    )
    text: str | None = Field(None, description="A log line (no newline) or a message.")
    data: dict[str, Any] = Field(default_factory=dict, description="Progress counters, results.")

    @property
    def terminal(self) -> bool:
        return self.kind == EventKind.status and self.status is not None and self.status.terminal

    @property
    def is_j2c_line(self) -> bool:
        """A log line of j2c's own (not the job's output)."""
        return self.kind == EventKind.log and self.origin == LineOrigin.j2c


class ImageChoice(Strict):
    name: str
    image: str
    description: str | None = None


class Capabilities(Strict):
    """What a scheduler backend can do with a request (requests asking more are refused)."""

    gpus: bool = Field(False, description="Hands out GPUs.")
    gpu_types: bool = Field(False, description="Can pick a GPU model (resources.gpu_type).")
    cpus: bool = Field(False, description="Gives a job the CPU cores it asks for (resources.cpus).")
    memory: bool = Field(
        False, description="Gives a job the memory it asks for (resources.memory)."
    )
    time_limit: bool = Field(
        False, description="Ends a job at its wall-clock limit (resources.time_limit_minutes)."
    )
    queues: bool = Field(False, description="Has queues/partitions to choose from.")
    multi_node: bool = Field(False, description="Runs one job on several nodes.")
    artifacts: bool = Field(True, description="Returns the job's outputs as artifacts.")
    arrays: bool = Field(False, description="Runs a sweep as one native array job.")


class ServerConfig(Strict):
    """GET /j2c/api/config: what the UI may know about the server's set-up; never credentials."""

    version: str
    storage_kind: str
    scheduler_kinds: list[str]
    capabilities: dict[str, Capabilities] = Field(
        default_factory=dict, description="What each scheduler backend supports."
    )
    skipped_schedulers: dict[str, str] = Field(
        default_factory=dict,
        description="Scheduler plug-ins skipped at start-up (their package failed to load), "
        "each with why; not in scheduler_kinds.",
    )
    default_scheduler: str
    default_image: str | None
    images: list[ImageChoice]
    compression_level: int
    max_attempts: int = Field(
        3, description="New attempts after a preemption or a lost node (resume.max_attempts)."
    )
    root_dir_name: str | None = None


class SendDefaults(Strict):
    """GET /j2c/api/defaults: what the Send form proposes for a file
    (``j2c_server.jobs.send.proposal``,
    the rule ``%j2c submit`` follows too). Paths are relative to the server's root ('' is the
    root itself)."""

    code_path: str = Field(..., description="The project folder around the file.")
    call_path: str | None = Field(
        None, description="The entry point relative to the project; null for a folder."
    )
    venv_path: str | None = Field(
        None, description="The venv to ship; null for none (never a guessed, missing .venv)."
    )
    venv_reason: str = Field(..., description="Why this venv (or none) was chosen.")
