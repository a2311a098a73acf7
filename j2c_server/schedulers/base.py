"""The Scheduler interface every backend implements, and :class:`SchedulerBase`: what differs
per backend besides running jobs (its settings, what it supports, how its jobs start
``j2c-unpack``, its own document for ``--dry-run``), with the common defaults.

A backend turns a :class:`JobSpec` into a running job and reports on it in the common
:class:`~j2c_server.wire.api.JobStatus` vocabulary; a job that ended through no fault of its
code (preempted, its node or container lost) says so in ``SchedulerState.interrupted``, each
backend by its own evidence. ``submit`` is idempotent on ``spec.key``: a
retried submit of the same key adopts the job that already exists instead of creating a second.
Logs are followed from a resumable cursor: a watcher that dies and restarts continues where the
last persisted cursor points, so no line is lost or doubled.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from j2c_server.core.errors import ConfigError, InvalidInput, J2CError
from j2c_server.wire.api import Capabilities, JobHandle, JobResults, JobStatus, Resources

if TYPE_CHECKING:
    from j2c_server.config import J2CSettings

UNPACK_CONSOLE_SCRIPT = "j2c-unpack"


class JobSpec(BaseModel):
    """What the pipeline's configure stage hands to a scheduler. ``command`` and ``env`` never
    hold a credential: they are written into the scheduler's own spec, which it stores and shows
    (a Kubernetes Job, a Ray job, a container, a Slurm job). ``secret_env`` holds what the job's
    environment needs that is one (an operator's ``pass_env`` value, the outputs upload policy,
    a presigned manifest URL): never dumped, never shown, handed to the job by reference
    (``schedulers/job_secrets.py``)."""

    model_config = ConfigDict(extra="forbid")

    key: str = Field(..., description="Idempotency key (deterministic per request).")
    job_id: str = Field(..., description="The j2c job id (for labels, names and comments).")
    name: str
    image: str | None = None
    command: list[str] = Field(..., description="argv: j2c-unpack <manifest> -- <args>")
    env: dict[str, str] = Field(default_factory=dict)
    secret_env: dict[str, str] = Field(default_factory=dict, exclude=True, repr=False)
    resources: Resources = Field(default_factory=Resources)
    user: str | None = None
    attempt: int = Field(
        1,
        ge=1,
        description="Which run of the job this is: a resumed job's later attempt has a key of "
        "its own, and a backend that names things by the job id tells the attempts apart.",
    )


class SchedulerState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: JobStatus
    message: str | None = Field(None, description="e.g. why it is still pending.")
    exit_code: int | None = None
    interrupted: str | None = Field(
        None,
        description="Set on a failed or lost job that ended through no fault of its code: "
        "preempted, its node or container lost (each backend says how it tells). The words say "
        "which; the pipeline may run the job again as a new attempt (docs/pipeline.md).",
    )
    node: str | None = Field(None, description="The node the job ran on, when known.")


@dataclass(frozen=True, slots=True)
class LogLine:
    """One line of a job's output. A plain dataclass, not a model: every backend builds them
    from text it decoded itself, thousands a second with many jobs printing."""

    text: str  # one line, without its newline
    cursor: str  # the resume point just after this line
    # Where the engine says the line was written: only a container engine keeps the two apart
    # (its log frames); a log file (local, Slurm), the Kubernetes and Ray logs merge them: None.
    stream: Literal["stdout", "stderr"] | None = None
    rank: int | None = None  # the node rank that wrote it (multi-node jobs)


@runtime_checkable
class Scheduler(Protocol):
    name: str

    async def submit(self, spec: JobSpec) -> JobHandle: ...

    async def status(self, handle: JobHandle) -> SchedulerState: ...

    def follow_logs(self, handle: JobHandle, cursor: str | None = None) -> AsyncIterator[LogLine]:
        """Yield lines as they are written, starting after ``cursor``; end once the job is
        terminal and its output is drained. Raises SchedulerUnavailable when the backend cannot
        be reached (the caller retries from the last cursor)."""
        ...

    async def cancel(self, handle: JobHandle) -> None:
        """Ask the job to stop: SIGTERM (or the backend's equivalent), then kill after a grace."""
        ...

    async def results(self, handle: JobHandle) -> JobResults: ...

    async def close(self) -> None: ...


@runtime_checkable
class ArrayScheduler(Scheduler, Protocol):
    """A backend that runs a sweep as one native array job (``Capabilities.arrays``)."""

    array_index_env: str  # the variable that holds each task's index

    async def submit_array(
        self, spec: JobSpec, size: int, max_parallel: int | None
    ) -> list[JobHandle]:
        """Submit ``spec`` as ``size`` tasks, at most ``max_parallel`` running at once; one
        handle per task, in index order, each read, followed and cancelled as a job. Idempotent
        on ``spec.key`` like ``submit``."""
        ...


def no_image() -> InvalidInput:
    """What a container-running backend says of a job with no image and no default."""
    return InvalidInput(
        "image: no container image given and no default is configured",
        field="image",
        hint="pass an image (--image, the form's Image), set default_image, or run in a lab "
        "with JUPYTER_IMAGE set",
    )


def required_image(spec: JobSpec, settings: J2CSettings) -> str:
    """The image a container-running backend starts: the job's, else the configured default."""
    image = spec.image or settings.lab_image()
    if not image:
        raise no_image()
    return image


def not_a_memory_size(memory: str) -> InvalidInput:
    """What a backend raises for a memory request its own units cannot express."""
    return InvalidInput(
        f"resources.memory: {memory!r} is not a memory size (e.g. '16Gi', '8G', '512Mi')",
        field="resources.memory",
    )


def not_a_size_setting(key: str, value: str, example: str) -> ConfigError:
    """What a backend raises for a size in its settings (``scheduler.<name>.shm_size``) that
    its units cannot express; ``example`` is one they can."""
    return ConfigError(f"{key}: {value!r} is not a size (e.g. {example!r})", field=key)


@dataclass(frozen=True)
class InventoryTarget:
    """What a job's Python runs on, as the image store knows it: the key its inventory is kept
    under (before any resolving, see :meth:`SchedulerBase.inventory_key`) and its words."""

    scheduler: str
    key: str  # "image:<reference>", "<scheduler>:-", or a backend's own
    label: str  # "image localhost/x:1", "slurm partition gpu"
    image: str | None = None


class SchedulerBase:
    """What a backend declares about itself; subclasses implement :class:`Scheduler` too.

    ``remote``: its jobs run on machines other than the server's, so a ``file://`` store
    reaches them only when ``storage.shared`` says its folder is mounted there too (checked at
    preflight and submit by :meth:`store_problem`, for every backend alike)."""

    name: ClassVar[str]
    settings_model: ClassVar[type[BaseModel]]
    capabilities: ClassVar[Capabilities] = Capabilities()
    remote: ClassVar[bool] = False

    def __init__(self, settings: J2CSettings) -> None:
        """Made with the whole settings; each backend keeps what it needs of them."""

    @classmethod
    def unpack_command(cls, settings: J2CSettings) -> list[str]:
        """How a job starts ``j2c-unpack``: by default the console script on the image's PATH."""
        return [UNPACK_CONSOLE_SCRIPT]

    @classmethod
    def native_spec(cls, spec: JobSpec, settings: J2CSettings) -> dict[str, Any] | None:
        """The backend's own job document for ``--dry-run`` (None: the JobSpec is shown)."""
        return None

    @classmethod
    async def preflight_problems(cls, settings: J2CSettings) -> list[tuple[str, str]]:
        """``(setting, why)`` for each setting this backend's submit would refuse, found by
        asking the backend itself (e.g. the container engine's ``/info``); by default none."""
        return []

    @classmethod
    async def image_problem(cls, settings: J2CSettings, image: str | None) -> J2CError | None:
        """Why a job sent here with ``image`` could not start (no image where one is needed,
        one the engine does not have), known before anything is scanned; None when it can, or
        when it cannot be known here (the submit then says)."""
        return None

    @classmethod
    async def preflight_notes(cls, settings: J2CSettings) -> list[tuple[str, str]]:
        """``(setting, what)`` for what sending a job here exposes that its user should know
        before sending (who else can read it there): warnings, not refusals; by default none."""
        return []

    @classmethod
    def check_resources(cls, resources: Resources) -> None:
        """Refuse (``InvalidInput`` naming the field) a request this backend cannot run as
        asked, beyond what its ``capabilities`` say; checked before anything is scanned."""

    @classmethod
    def inventory_target(cls, settings: J2CSettings, image: str | None) -> InventoryTarget | None:
        """Which inventory a job sent here with ``image`` runs on (docs/images.md); None when
        it runs on the lab's own Python. By default the image as given (digest included when it
        has one), else the backend's nodes."""
        if image:
            return InventoryTarget(cls.name, f"image:{image}", f"image {image}", image)
        return InventoryTarget(cls.name, f"{cls.name}:-", f"{cls.name} nodes")

    @classmethod
    async def inventory_key(cls, settings: J2CSettings, target: InventoryTarget) -> str | None:
        """The key the target's inventory is kept under, resolved now (a backend whose engine
        names images by ID answers that); None when the target does not exist there."""
        return target.key

    @classmethod
    async def probe_inventory(
        cls, settings: J2CSettings, target: InventoryTarget
    ) -> dict[str, Any] | None:
        """The target's inventory taken now by running its Python (``unpack/inventory.py``'s
        JSON); None when this backend cannot, or is set not to (then a job's own
        ``j2c-unpack`` teaches it). Raise a :class:`~j2c_server.core.errors.J2CError` saying
        why a probe failed."""
        return None

    @classmethod
    async def job_inventory_key(
        cls, settings: J2CSettings, target: InventoryTarget, handle: JobHandle
    ) -> str | None:
        """The key a running job's own inventory line is kept under (None: not kept)."""
        return target.key

    @classmethod
    def store_problem(cls, settings: J2CSettings, url: str) -> str | None:
        """Why this backend's jobs cannot read the ``file://`` store at ``url``, which is not
        ``storage.shared`` (None: they can). By default: they cannot when ``remote``."""
        if not cls.remote:
            return None
        return (
            f"storage.url: {url} is a folder on this machine, but {cls.name} jobs run on other "
            "machines and cannot read it; set storage.url to an object store (s3://...), or "
            "storage.shared: true if that folder is mounted at the same path on the compute "
            "nodes"
        )
