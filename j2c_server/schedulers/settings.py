"""``scheduler.*``: the default backend, where j2c-unpack places layers, this machine's GPU
ledger, the credential allow-list, and one section per backend (``scheduler.<name>``, typed by
that backend's settings model), added from the backends found on the first settings load, never
at import.

Owned by the scheduler table (:mod:`j2c_server.schedulers`); :mod:`j2c_server.config` puts it in
the whole settings. Importing it imports no backend: the table is read inside the functions.
"""

from __future__ import annotations

import logging
from functools import cache
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetPydanticSchema,
    create_model,
    field_validator,
    model_validator,
)

SectionT = TypeVar("SectionT", bound=BaseModel)

log = logging.getLogger(__name__)


class SchedulerSettingsBase(BaseModel):
    """``scheduler.*``: the default backend and the credential allow-list; each backend's own
    section (``scheduler.<name>``) is a field added from the backends found on the first
    settings load (:func:`scheduler_settings_model`), typed by that backend's settings model."""

    model_config = ConfigDict(extra="forbid")

    default: str = "local"
    placement: Literal["original", "relocate"] = Field(
        "original",
        description="Where j2c-unpack puts the code and venv: at their original paths when "
        "free and private (a warm start hard-links the venv from the node cache and copies the "
        "code), or relocate (under its workdir; a cached venv runs in place). Passed as "
        "J2C_UNPACK_PATHS; a request's env may set its own.",
    )
    gpu_ledger: str = Field(
        "/tmp/j2c-gpus",  # = schedulers.gpu_ledger.DEFAULT_LEDGER_DIR
        description="Folder of the machine-wide GPU ledger that the backends running jobs on "
        "this machine (local, container) share with every user's servers: root-owned with "
        "mode 1777 (sticky), or the user's own.",
    )
    pass_env: list[str] = Field(
        default_factory=list,
        description="Credential-like variables (tokens, keys, passwords) a request's env may "
        "name, on every backend: the job gets the submitting server's value, never the "
        "request's; nothing else of the kind is accepted.",
    )

    @field_validator("pass_env")
    @classmethod
    def _pass_env_names(cls, value: list[str]) -> list[str]:
        # Exact names only: an allow-list of credentials takes no patterns.
        for name in value:
            if not (name.isascii() and name.isidentifier()):
                raise ValueError(f"{name!r} is not an environment variable name")
        return value

    @model_validator(mode="before")
    @classmethod
    def _skipped_sections(cls, data: Any) -> Any:
        # A skipped plug-in's section is a warning, not an error: the rest still loads.
        if not isinstance(data, dict):
            return data
        from j2c_server.schedulers import skipped_backends

        skipped = skipped_backends()
        for name in data.keys() & skipped.keys():
            log.warning(
                "scheduler.%s ignored: the %s scheduler plug-in was skipped (%s)",
                name,
                name,
                skipped[name],
            )
        return {key: value for key, value in data.items() if key not in skipped}

    def section(self, name: str, model: type[SectionT]) -> SectionT:
        """The validated ``scheduler.<name>`` section, typed (what a backend reads)."""
        value = getattr(self, name)
        if not isinstance(value, model):
            raise TypeError(f"scheduler.{name} is a {type(value).__name__}, not {model.__name__}")
        return value


@cache
def scheduler_settings_model() -> type[SchedulerSettingsBase]:
    """``scheduler.*`` with a section per usable backend, built on the first settings load,
    never at import: a plug-in imports this module as the built-ins do, and discovering it
    here (:func:`j2c_server.schedulers.discover`) then finds this module complete."""
    from j2c_server.schedulers import settings_models

    sections: dict[str, Any] = {
        name: (model, Field(default_factory=model)) for name, model in settings_models().items()
    }
    return create_model("SchedulerSettings", __base__=SchedulerSettingsBase, **sections)


# Typed as the base (backends read their section through section()); validated, dumped and
# described as the model above, which pydantic asks for when J2CSettings is first used.
SchedulerSettings = Annotated[
    SchedulerSettingsBase,
    GetPydanticSchema(lambda _source, handler: handler(scheduler_settings_model())),
]
