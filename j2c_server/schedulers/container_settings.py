"""Settings of the ``container`` scheduler (``scheduler.container.*``).

Kept apart from :mod:`.container` so :mod:`j2c_server.config` can import it without importing
the backend (which imports the config).
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

NOT_ROOT = "1000:1000"


class ContainerSettings(BaseModel):
    """One machine's container engine, reached through the Docker Engine API on a socket."""

    model_config = ConfigDict(extra="forbid")

    socket: str = Field(
        "/run/podman/podman.sock",
        description="Unix socket of the Docker Engine API: podman's (`podman system service`) "
        "or Docker's (/var/run/docker.sock).",
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

    def job_user(self) -> str:
        """The uid:gid jobs run as: ``user``, else the server's own (see ``user``)."""
        if self.user:
            return self.user
        uid, gid = os.getuid(), os.getgid()
        return NOT_ROOT if uid == 0 else f"{uid}:{gid}"
