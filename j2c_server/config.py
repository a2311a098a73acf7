"""One settings model for the server extension, the magic and the CLI, and how it is loaded.

Precedence, lowest first: built-in defaults < YAML config file < ``J2C_*`` environment variables
< explicit overrides (the server's traitlets ``J2CApp.settings``, or CLI flags). Nested keys in the
environment use ``__``: ``J2C_STORAGE__URL=s3://bucket/prefix``. Unknown keys are errors that
name the key. Credentials are never part of this model: storage uses the standard AWS chain,
schedulers read tokens from files or the environment named here.

A part owns its section where that makes no import circle: ``storage.*``
(:mod:`j2c_server.storage.settings`), ``scheduler.*`` (:mod:`j2c_server.schedulers.settings`),
``registry.*`` (:mod:`j2c_server.registry.settings`). The sections of the parts that read the
whole settings themselves (mlflow, outputs, resume, usage, metrics, sweep: jobs/ and usage/
import this module) and ``pack.*`` (importing ``j2c_server.pack`` loads the packer) stay here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from j2c_server.core.config_locks import Layer, is_locked, merge_with_locks, operator_locks
from j2c_server.core.errors import ConfigError, validation_error_to_j2c
from j2c_server.core.job_env import is_credential_name
from j2c_server.registry.settings import RegistrySettings
from j2c_server.schedulers.settings import SchedulerSettings, scheduler_settings_model
from j2c_server.storage.settings import StorageSettings as StorageSettings  # owned by storage/
from j2c_server.wire.api import ImageChoice, checkpoint_dirs

ENV_PREFIX = "J2C_"
ENV_DELIMITER = "__"
# Variables of ours that are not settings keys (they select files, not values).
_ENV_NOT_SETTINGS = {"J2C_CONFIG", "J2C_DATA_DIR", "J2C_OUTPUT_DIR", "J2C_JOB_ID"}
# The server's root folder as its kernels see it (read by ``%j2c``'s defaults, magic.py).
_ENV_NOT_SETTINGS.add("J2C_SERVER_ROOT")
# What scripts/slurm-up.sh exports for the tests: a test cluster's address, not settings.
_ENV_NOT_SETTINGS |= {
    f"J2C_SLURM_{name}"
    for name in ("DIR", "URL", "USER", "TOKEN", "TOKEN_FILE", "JOB_DIR", "NODES")
}
# What scripts/ray-up.sh exports beside the Ray setting (`eval "$(scripts/ray-up.sh DIR)"` then
# `j2c submit --scheduler ray` must work), and the mark its head's processes carry.
_ENV_NOT_SETTINGS |= {f"J2C_RAY_{name}" for name in ("DIR", "BIN", "GCS", "HEAD")}
# What scripts/hub-up.sh exports for the hub's tests (its labs may inherit them).
_ENV_NOT_SETTINGS |= {
    f"J2C_HUB_{name}" for name in ("DIR", "PASSWORD", "ADMIN_TOKEN", "PROXY_TOKEN")
}
# Where scripts/platform-image.sh keeps the test engine's exports (the container tests).
_ENV_NOT_SETTINGS.add("J2C_PODMAN_DIR")
# Turns on the UI benchmark (ui-tests/tests/bench-logpanel.spec.ts); the server inherits it.
_ENV_NOT_SETTINGS.add("J2C_BENCH")
# The CLI's and magic's job defaults (``job:`` in the file, ``J2C_JOB__*`` in the environment)
# share the file and the prefix but are not settings: the front ends read them
# (``cli/options.py``), settings loading leaves them out.
JOB_SECTION = "job"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PackSettings(_Section):
    compression_level: int = Field(3, ge=1, le=22)
    threads: int = Field(0, ge=-1, description="zstd worker threads; 0 = one per core.")
    soft_limit_mb: int = Field(2048, ge=1, description="Warn above this total size.")
    hard_limit_mb: int = Field(20480, ge=1, description="Refuse above this total size.")
    max_concurrent_packs: int = Field(1, ge=1)
    layer_cache_max_mb: int = Field(
        2048,
        ge=1,
        description="Cap of the lab's layer cache: least recently used layers are removed "
        "beyond it (the last 4 used, and each project's last sends, are always kept).",
    )
    layer_cache_keep_sends: int = Field(
        2,
        ge=0,
        description="Sends per project whose blobs (layers and big files) the layer cache "
        "always keeps, whatever the cap.",
    )
    big_file_mb: float = Field(
        1.0,
        ge=0,
        description="Code files of at least this size travel as their own blobs, not in the "
        "code layer, so an edit elsewhere does not send them again (0: never).",
    )
    code_part_kb: int = Field(
        256,
        ge=0,
        description="Target uncompressed size of one part of the code layer: the small files "
        "travel as several content-addressed parts, so an edit re-packs and uploads only the "
        "part holding the edited file (0: one code layer).",
    )
    ship_base_packages: bool = Field(
        True,
        description="Lab-base distributions (what --system-site-packages let pip skip) that "
        "the job's image lacks travel with the job as their own layer (docs/images.md).",
    )
    base_conflicts: Literal["auto", "ship", "image"] = Field(
        "auto",
        description="A needed lab-base distribution the image has at another version: ship "
        "the lab's, use the image's, or auto (the lab's only where the image's fails a "
        "requirement of the job's packages).",
    )
    check_in_job: bool = Field(
        True,
        description="For a target the lab knows nothing of yet, the manifest carries what the "
        "job needs of its base Python (format 6) and j2c-unpack lists every gap before the entry "
        "point (docs/images.md); off for images whose j2c-unpack reads format 5 or older.",
    )
    watch_venv: bool = Field(
        True,
        description="A long-lived pack worker keeps a venv's scan while an inotify watch on its "
        "tree sees no change (docs/packing.md); false walks the venv on every send.",
    )


class MlflowSettings(_Section):
    """Tracking jobs in MLflow (:mod:`~.jobs.tracking`); off while no tracking URI is known."""

    tracking_uri: str | None = Field(
        None, description="The tracking server (http(s)://...); default: MLFLOW_TRACKING_URI."
    )
    experiment: str | None = Field(
        None, description="The experiment's name; default: the project folder's name."
    )
    pass_env: list[str] = Field(
        default_factory=lambda: ["MLFLOW_S3_ENDPOINT_URL"],
        description="MLFLOW_* variables of the server the job gets too (locations, flags: no "
        "credentials; those reach the job by the operator's mechanism).",
    )
    timeout_s: float = Field(5.0, gt=0, description="Per call to the tracking server.")

    @field_validator("pass_env")
    @classmethod
    def _only_mlflow_locations(cls, value: list[str]) -> list[str]:
        for name in value:
            if not name.startswith("MLFLOW_") or not name.isidentifier():
                raise ValueError(f"{name!r} is not an MLFLOW_* variable name")
            if is_credential_name(name):
                raise ValueError(
                    f"{name!r} holds a credential: it never goes into a job spec; give it to "
                    "jobs by the operator's mechanism (a Kubernetes Secret, the nodes' env)"
                )
        return value

    def uri(self) -> str | None:
        return self.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or None


class OutputsSettings(_Section):
    """What comes back from a job (``j2c-unpack --outputs-*``, see docs/unpack.md *Outputs*):
    ``$J2C_OUTPUT_DIR`` and what the job created or changed in its working copy."""

    max_file_mb: float = Field(
        5000.0, gt=0, allow_inf_nan=False, description="An output larger than this is left out."
    )
    max_total_mb: float = Field(
        20000.0,
        gt=0,
        allow_inf_nan=False,
        description="Outputs past this total are left out (the largest first).",
    )
    sync_every_minutes: float = Field(
        10.0,
        ge=0,
        allow_inf_nan=False,
        description="Upload new and changed outputs this often while the job runs (and on "
        "SIGTERM), so a killed job keeps its checkpoints; 0: only on SIGTERM and at the end.",
    )


class ResumeSettings(_Section):
    """A job preempted or whose node or container was lost runs again as a new attempt, resumed
    from its last synced checkpoint (docs/pipeline.md *Attempts*); its checkpoint folders travel
    to the store while it runs (docs/unpack.md *Checkpoints*)."""

    max_attempts: int = Field(
        3,
        ge=0,
        le=100,
        description="New attempts after a preemption or a lost node or container (0: none); a "
        "job's own max_attempts wins.",
    )
    backoff_s: float = Field(
        10.0,
        ge=0,
        le=3600,
        allow_inf_nan=False,
        description="Wait before the second attempt; doubled for each later one (at most 10 "
        "minutes).",
    )
    checkpoint_dirs: list[str] = Field(
        default_factory=lambda: ["checkpoints"],
        description="Folders (relative to the job's working directory) synced to the store "
        "while it runs and restored when it resumes; a job's own checkpoint_dirs win.",
    )
    sync_every_s: float = Field(
        30.0,
        ge=1,
        allow_inf_nan=False,
        description="A changed checkpoint folder is uploaded at most this often (and at once on "
        "SIGTERM); only files unchanged for a second count as written.",
    )
    keep_last: int = Field(
        3,
        ge=1,
        le=1000,
        description="Checkpoints kept in the store: the newest N entries of each checkpoint "
        "folder (a file or a folder each); older ones are dropped from the store, said in the "
        "job's log.",
    )
    max_mb: float = Field(
        20000.0,
        gt=0,
        allow_inf_nan=False,
        description="Cap on a job's checkpoints in the store (MB); older entries past it are "
        "left out.",
    )

    @field_validator("checkpoint_dirs")
    @classmethod
    def _inside_workdir(cls, value: list[str]) -> list[str]:
        return checkpoint_dirs(value)


class UsageSettings(_Section):
    """Usage records in the store (:mod:`~.usage`), read back by ``j2c usage``."""

    enabled: bool = Field(
        True,
        description="Write a record per job under usage/YYYY/MM/DD/ in the store, at submit "
        "and at its end.",
    )


class MetricsSettings(_Section):
    """The Prometheus metrics on the server's /metrics (:mod:`~.metrics`)."""

    user_labels: bool = Field(
        False,
        description="Label job counters with the user name (one series per user: mind a large "
        "hub's cardinality).",
    )


class SweepSettings(_Section):
    """Sweeps (:mod:`~.jobs.sweep`): one send, many variants."""

    max_variants: int = Field(
        256,
        ge=1,
        description="A sweep of more variants is refused at the send, before anything is "
        "scanned (each variant is a job of its own in the registry and on the scheduler).",
    )


class J2CSettings(_Section):
    # Built when first used: the scheduler sections need the backends discovered.
    model_config = ConfigDict(extra="forbid", defer_build=True)

    data_dir: str | None = Field(None, description="Registry, cache and embedded store.")
    default_image: str | None = Field(
        None, description="Default container image; default: the lab's own (JUPYTER_IMAGE...)."
    )
    images: list[ImageChoice] = Field(default_factory=list)
    storage: StorageSettings = Field(default_factory=StorageSettings)
    pack: PackSettings = Field(default_factory=PackSettings)
    scheduler: SchedulerSettings = Field(default_factory=lambda: scheduler_settings_model()())
    mlflow: MlflowSettings = Field(default_factory=MlflowSettings)
    usage: UsageSettings = Field(default_factory=UsageSettings)
    outputs: OutputsSettings = Field(default_factory=OutputsSettings)
    resume: ResumeSettings = Field(default_factory=ResumeSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    sweep: SweepSettings = Field(default_factory=SweepSettings)
    registry: RegistrySettings = Field(default_factory=RegistrySettings)

    # ---------------------------------------------------------------- derived values

    # The operator's locked keys (core/config_locks.py), set by load_settings.
    _locked: frozenset[str] = PrivateAttr(default_factory=frozenset)

    def is_locked(self, key: str) -> bool:
        """Whether the operator's config owns ``key`` (dotted, e.g. scheduler.container.user)."""
        return is_locked(self._locked, key)

    def data_path(self) -> Path:
        if self.data_dir:
            return Path(self.data_dir).expanduser()
        env = os.environ.get("J2C_DATA_DIR")
        if env:
            return Path(env).expanduser()
        from jupyter_core.paths import jupyter_data_dir

        return Path(jupyter_data_dir()) / "j2c"

    def storage_url(self) -> str:
        if self.storage.url:
            return self.storage.url
        return (self.data_path() / "store").resolve().as_uri()

    def lab_image(self) -> str | None:
        """The image this lab runs in, as JupyterHub's spawners advertise it."""
        if self.default_image:
            return self.default_image
        for name in ("JUPYTER_IMAGE_SPEC", "JUPYTER_IMAGE"):
            if os.environ.get(name):
                return os.environ[name]
        return None


def _map_fields(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """The key paths of the model's mappings (``scheduler.slurm.env``, ``job.env``, ...)."""
    found: set[tuple[str, ...]] = set()
    for name, info in model.model_fields.items():
        kinds = [info.annotation, *get_args(info.annotation)]
        for kind in kinds:
            if get_origin(kind) is dict:
                found.add((*prefix, name))
            elif isinstance(kind, type) and issubclass(kind, BaseModel):
                found |= _map_fields(kind, (*prefix, name))
    return found


def _case_kept_maps() -> set[tuple[str, ...]]:
    from j2c_server.wire.api import JobRequest

    return (
        _map_fields(J2CSettings)
        | _map_fields(scheduler_settings_model(), ("scheduler",))
        | _map_fields(JobRequest, (JOB_SECTION,))
    )


def env_overrides(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """``J2C_A__B=v`` → ``{"a": {"b": "v"}}``; pydantic then coerces the strings.

    Setting names are case-insensitive, but the keys of a mapping are data and keep their
    case: ``J2C_SCHEDULER__SLURM__ENV__PATH=/x`` is ``scheduler.slurm.env = {"PATH": "/x"}``.
    """
    environ = dict(os.environ) if environ is None else environ
    maps = _case_kept_maps()
    out: dict[str, Any] = {}
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX) or name in _ENV_NOT_SETTINGS:
            continue
        raw = name[len(ENV_PREFIX) :].split(ENV_DELIMITER)
        path: list[str] = []
        for index, part in enumerate(raw):
            if tuple(path) in maps:
                # The rest is one key of the mapping, as written.
                path.append(ENV_DELIMITER.join(raw[index:]))
                break
            path.append(part.lower())
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return out


def default_config_files() -> list[Path]:
    """The ``j2c.yaml`` files that apply, lowest precedence first: ``$J2C_CONFIG`` alone when
    set; else each ``j2c.yaml`` along Jupyter's config path, in Jupyter's order (an earlier
    folder wins), so an image's file (``/etc/jupyter``, an environment's ``etc/jupyter``) sets
    what an operator sets for everyone and keys can be changed in front of it."""
    env = os.environ.get("J2C_CONFIG")
    if env:
        return [Path(env).expanduser()]
    from jupyter_core.paths import jupyter_config_path

    candidates = [Path(folder) / "j2c.yaml" for folder in reversed(jupyter_config_path())]
    return [path for path in dict.fromkeys(candidates) if path.is_file()]


def default_config_file() -> Path | None:
    """The file that applies last (the user's own when there is one)."""
    files = default_config_files()
    return files[-1] if files else None


def read_config_file(path: Path) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist", field="config") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}", field="config") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top", field="config")
    return data


def validate_settings(data: dict[str, Any], *, source: str = "settings") -> J2CSettings:
    try:
        return J2CSettings.model_validate(data)
    except ValidationError as exc:
        raise validation_error_to_j2c(exc, error=ConfigError, context=source) from None


def load_settings(
    *,
    config_file: Path | None = None,
    overrides: dict[str, Any] | None = None,
    environ: dict[str, str] | None = None,
) -> J2CSettings:
    """Merge defaults < file < environment < overrides into one validated settings object."""
    paths = [config_file] if config_file is not None else default_config_files()
    layers = [Layer(str(each), read_config_file(each), each) for each in paths]
    path = paths[-1] if paths else None
    layers.append(Layer("the environment", env_overrides(environ), env=True))
    if overrides:
        layers.append(Layer("the overrides (server traits or command-line flags)", overrides))
    # The operator's ``locked:`` keys are enforced while merging (config_locks.py).
    merged = merge_with_locks(layers, read_config_file)
    merged.pop(JOB_SECTION, None)
    settings = validate_settings(merged, source=str(path) if path else "settings")
    settings._locked = operator_locks(read_config_file)
    return settings
