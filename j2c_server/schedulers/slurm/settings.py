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
    cache_dir: str | None = Field(
        None,
        description="A node-local folder for j2c-unpack's layer cache (not the shared "
        "filesystem: its locks and hard links are node-local); each user's cache is a folder "
        "in it, passed as J2C_UNPACK_CACHE. Default: none (every job extracts its layers).",
    )
    cache_max: str | None = Field(
        None,
        pattern=r"^[0-9]+(\.[0-9]+)?\s*[KMGT]?i?B?$",
        description="Size cap of each user's cache (J2C_UNPACK_CACHE_MAX; default 20G).",
    )
