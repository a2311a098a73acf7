"""Settings of the ``container`` scheduler (``scheduler.container.*``).

Kept apart from :mod:`.container` so :mod:`j2c_server.config` can import it without importing
the backend (which imports the config).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from j2c_server.core.errors import ConfigError

NOT_ROOT = "1000:1000"
# Where engines listen when nothing says otherwise: rootful podman, rootless podman, Docker.
USUAL_SOCKETS = (
    "/run/podman/podman.sock",
    "{XDG_RUNTIME_DIR}/podman/podman.sock",
    "/var/run/docker.sock",
)
# The Docker ecosystem's variables naming the engine (podman's remote client reads the second).
SOCKET_ENV = ("DOCKER_HOST", "CONTAINER_HOST")


def unix_socket(value: str) -> str:
    """``unix:///path`` or ``/path`` → ``/path``; ValueError for anything else."""
    text = value.strip()
    path = text[len("unix://") :] if text.startswith("unix://") else text
    if "://" in path or not path.startswith("/"):
        raise ValueError(
            f"{value!r} is not a unix socket (unix:///path or /path): the container backend "
            "speaks the Docker Engine API on a unix socket only (no tcp:// or ssh://)"
        )
    return path


class ContainerSettings(BaseModel):
    """One machine's container engine, reached through the Docker Engine API on a socket."""

    model_config = ConfigDict(extra="forbid")

    socket: str | None = Field(
        None,
        description="Unix socket of the Docker Engine API (/path or unix:///path): podman's "
        "(`podman system service`) or Docker's. Default: $DOCKER_HOST, else $CONTAINER_HOST "
        "(unix:// only), else the first of /run/podman/podman.sock, "
        "$XDG_RUNTIME_DIR/podman/podman.sock, /var/run/docker.sock that exists.",
    )
    api_version: str = Field("v1.41", pattern=r"^v[0-9]+\.[0-9]+$")
    user: str | None = Field(
        None,
        pattern=r"^[0-9]+(:[0-9]+)?$",
        description="uid:gid the job runs as (numeric). Default: the server's own uid:gid, so "
        "the job reads the private store and the server reads what the job writes; "
        f"{NOT_ROOT} when the server runs as root (a job never runs as root by default).",
    )
    cancel_grace_s: float = Field(10.0, ge=0, description="SIGTERM, then SIGKILL after this.")
    gpus: int | None = Field(None, ge=0, description="GPUs to hand out; default: detected.")
    gpu_mode: Literal["cdi", "device_requests"] = Field(
        "cdi",
        description="cdi: CDI device names in HostConfig.Devices (podman, Docker >= 25); "
        "device_requests: Docker's DeviceRequests (nvidia-container-toolkit).",
    )
    cdi_kind: str = Field("nvidia.com/gpu", description="CDI kind of the GPU devices.")
    shm_size: str | None = Field("8G", description="/dev/shm size (PyTorch DataLoader workers).")
    network: str | None = Field(None, description="HostConfig.NetworkMode; default: the engine's.")
    runs_dir: str | None = Field(
        None,
        description="Host folder for each job's HOME and outputs; default: <data dir>/containers. "
        "The engine must see it at the same path.",
    )
    credentials_dir: str | None = Field(
        None,
        description="Host folder with AWS credentials/config files, mounted read-only at "
        "$HOME/.aws in the job (credentials never go into the container's env).",
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="Environment every job starts with."
    )
    poll_interval_s: float = Field(0.5, gt=0, description="How often to re-read a container.")
    keep_finished: bool = Field(
        False,
        description="Keep a finished container on the engine (for debugging); by default it is "
        "removed once its logs, exit code and outputs are collected.",
    )
    cache: bool = Field(
        True,
        description="Keep j2c-unpack's layer cache on this machine between jobs (a warm start "
        "extracts nothing): one folder per job uid and per user under cache_dir, bind-mounted "
        "at /j2c/cache.",
    )
    cache_dir: str | None = Field(
        None,
        description="Host folder of the layer cache (per uid and user below it); default: "
        "<data dir>/unpack-cache. The engine must see it at the same path.",
    )
    cache_max: str | None = Field(
        None,
        pattern=r"^[0-9]+(\.[0-9]+)?\s*[KMGT]?i?B?$",
        description="Size cap of each cache folder (J2C_UNPACK_CACHE_MAX; default 20G).",
    )
    probe_images: bool = Field(
        True,
        description="At preflight, inventory an image the lab does not know yet with a "
        "short-lived container of it (docs/images.md); off: the first job's j2c-unpack checks "
        "what the job needs and teaches the lab the image.",
    )
    cap_add: list[str] = Field(
        default_factory=list,
        description="Capabilities given back to the job (every one is dropped by default), "
        "e.g. ['SYS_PTRACE'] for a debugger.",
    )
    pids_limit: int = Field(
        4096, ge=0, description="Processes and threads a job may have (0: the engine's default)."
    )
    time_limit_minutes: float | None = Field(
        None,
        gt=0,
        description="Wall-clock limit of every container job, in minutes (fractions allowed); "
        "a request's own resources.time_limit_minutes applies when lower. Past it the job is "
        "stopped (SIGTERM, SIGKILL after cancel_grace_s) and fails: 'timed out after N min'.",
    )

    @field_validator("cap_add")
    @classmethod
    def _capability_names(cls, value: list[str]) -> list[str]:
        names = [name.strip().upper().removeprefix("CAP_") for name in value]
        bad = [name for name in names if not re.fullmatch(r"[A-Z_]+", name) or name == "ALL"]
        if bad:
            raise ValueError(
                f"{bad!r}: name capabilities one by one (e.g. SYS_PTRACE); ALL is not given back"
            )
        return names

    @field_validator("socket")
    @classmethod
    def _unix_socket(cls, value: str | None) -> str | None:
        return unix_socket(value) if value and value.strip() else None

    def socket_path(self, environ: Mapping[str, str] | None = None) -> str:
        """The engine's socket: ``socket``, else ``$DOCKER_HOST`` / ``$CONTAINER_HOST``, else
        the first usual path that exists (podman's rootful one when none does)."""
        if self.socket:
            return self.socket
        env = os.environ if environ is None else environ
        for name in SOCKET_ENV:
            if env.get(name, "").strip():
                try:
                    return unix_socket(env[name])
                except ValueError as exc:
                    raise ConfigError(
                        f"${name}: {exc} (read because scheduler.container.socket is unset)",
                        field="scheduler.container.socket",
                        hint="set scheduler.container.socket to the engine's unix socket",
                    ) from None
        runtime = env.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"
        candidates = [path.format(XDG_RUNTIME_DIR=runtime) for path in USUAL_SOCKETS]
        return next((path for path in candidates if os.path.exists(path)), candidates[0])

    def job_user(self) -> str:
        """The uid:gid jobs run as: ``user``, else the server's own (see ``user``)."""
        if self.user:
            return self.user
        uid, gid = os.getuid(), os.getgid()
        return NOT_ROOT if uid == 0 else f"{uid}:{gid}"
