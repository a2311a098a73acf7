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
    gpu_ledger: str = Field(
        "/tmp/j2c-gpus",  # = schedulers.local_gpus.DEFAULT_LEDGER_DIR
        description="Folder of the machine-wide GPU ledger, shared by every user's servers: "
        "root-owned with mode 1777 (sticky), or the user's own.",
    )
    cache: bool = Field(
        True,
        description="Keep j2c-unpack's layer cache between jobs (a warm start extracts "
        "nothing), in cache_dir/<uid>/<user>.",
    )
    cache_dir: str | None = Field(
        None, description="Folder of the layer cache; default: <data dir>/unpack-cache."
    )
