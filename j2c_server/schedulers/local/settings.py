"""Settings of the ``local`` scheduler (``scheduler.local.*``): light, so that loading the
configuration never imports the backend."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class LocalSchedulerSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    gpus: int | None = Field(None, ge=0, description="GPUs to hand out; default: detected.")
    cancel_grace_s: float = Field(10.0, ge=0)
    pass_env: list[str] = Field(
        default_factory=list,
        description="More variables of the server's environment that jobs inherit: names, "
        "or prefixes ending in '*'.",
    )
    keep_runs: int = Field(
        100,
        ge=0,
        description="Finished runs whose folders (<data dir>/runs/<job id>) are kept after "
        "their results were collected, newest first; older ones are removed (their logs stay "
        "in the registry, their outputs in the store). A run with files in outputs/ is kept.",
    )
    cache: bool = Field(
        True,
        description="Keep j2c-unpack's layer cache between jobs (a warm start extracts "
        "nothing), in cache_dir/<uid>/<user>.",
    )
    cache_dir: str | None = Field(
        None, description="Folder of the layer cache; default: <data dir>/unpack-cache."
    )
    cache_max: str | None = Field(
        None,
        description="Size cap of that cache, e.g. 20G (j2c-unpack's J2C_UNPACK_CACHE_MAX; "
        "default: j2c-unpack's own, 20G); least recently used entries go beyond it.",
    )
