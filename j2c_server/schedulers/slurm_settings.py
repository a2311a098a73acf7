"""Settings of the ``slurm`` scheduler (``scheduler.slurm.*``): light, so that loading the
configuration never imports the backend."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class SlurmSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str | None = Field(None, description="slurmrestd base URL.")
    api_version: str = "v0.0.38"
    user: str | None = None
    token: str | None = Field(None, description="JWT; prefer token_file or SLURM_JWT.")
    token_file: str | None = None
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    job_dir: str | None = Field(None, description="Shared folder for job scripts and logs.")
    container_runtime: Literal["none", "pyxis"] = "none"
    cancel_grace_s: float = Field(10.0, ge=0)
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Environment every job starts with (jobs inherit nothing through "
        "slurmrestd), e.g. a PATH that finds j2c-unpack on the compute nodes.",
    )
