"""``storage.*``: the store's settings (:class:`StorageSettings`), owned by the storage part.

:mod:`j2c_server.config` puts them in the whole settings; ``j2c-unpack`` validates them alone
from the ``J2C_STORAGE__*`` environment (:func:`validate_storage`), and only when it reaches an
``s3://`` or ``http(s)://`` store: a ``file://`` store needs no model (and no pydantic) at all.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from j2c_server.core.errors import ConfigError, validation_error_to_j2c


class StorageSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str | None = Field(
        None, description="file:///path or s3://bucket/prefix; default: a folder in the data dir."
    )
    endpoint_url: str | None = Field(None, description="S3 endpoint (MinIO, Ceph, ...).")
    region: str | None = None
    addressing_style: Literal["auto", "path", "virtual"] = "auto"
    profile: str | None = Field(None, description="AWS profile name (credentials stay in ~/.aws).")
    part_size_mb: int = Field(16, ge=5, le=5120)
    concurrency: int = Field(8, ge=1, le=64)
    max_attempts: int = Field(6, ge=1, le=20)
    connect_timeout_s: float = Field(10.0, gt=0)
    read_timeout_s: float = Field(60.0, gt=0)
    presign_expiry_s: int = Field(7 * 24 * 3600, ge=60)
    presign_for_jobs: bool = Field(
        False, description="Give jobs presigned URLs instead of relying on cluster credentials."
    )
    shared: bool = Field(
        False,
        description="A file:// store's folder is mounted at the same path where jobs run "
        "(Slurm nodes, Kubernetes pods, containers) and read there by other users or uids: "
        "its objects are written readable by them (0644) instead of private to this user.",
    )


class _Storage(BaseModel):
    """The section under its own name, so that an error names ``storage.<key>``."""

    model_config = ConfigDict(extra="forbid")

    storage: StorageSettings = Field(default_factory=StorageSettings)


def validate_storage(values: dict[str, Any], *, source: str) -> StorageSettings:
    """``storage.*`` validated alone; a bad value is a ConfigError naming ``storage.<key>``."""
    try:
        return _Storage.model_validate({"storage": values}).storage
    except ValidationError as exc:
        raise validation_error_to_j2c(exc, error=ConfigError, context=source) from None
