"""``registry.*``: the job registry's upkeep (:class:`RegistrySettings`), owned by the registry;
:mod:`j2c_server.config` puts it in the whole settings."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator


class RegistrySettings(BaseModel):
    """The job registry's upkeep: finished jobs' events compacted into files
    (:mod:`.archive`)."""

    model_config = ConfigDict(extra="forbid")

    compact_after_hours: float | None = Field(
        24.0,
        allow_inf_nan=False,
        description="Move a finished job's events out of the registry into its stored log "
        "this long after it ended (0: as soon as it ends; negative or null: never). Reading "
        "them is unchanged.",
    )
    compact_every_minutes: float = Field(
        10.0, gt=0, allow_inf_nan=False, description="How often the server compacts."
    )
    compact_jobs_per_round: int = Field(
        100, ge=1, description="Jobs compacted per round at most (the rest: the next round)."
    )

    @field_validator("compact_after_hours", mode="before")
    @classmethod
    def _never(cls, value: Any) -> Any:
        # YAML's and the environment's ways of saying "off".
        if isinstance(value, str) and value.strip().lower() in ("", "never", "null", "none"):
            return None
        return value

    def compact_after_s(self) -> float | None:
        """Seconds after a job's end its events are compacted; None when never."""
        hours = self.compact_after_hours
        return None if hours is None or hours < 0 else hours * 3600
