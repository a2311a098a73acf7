"""An image's inventory, and the report of what a job needs that it lacks or has otherwise.

:class:`ImageInventory` is what ``unpack/inventory.py`` prints (validated here, extra fields
ignored: a newer j2c-unpack may say more). :class:`ImageReport` is part of the preflight plan
(``PackPlan.image_report``), so it is a wire model; ``text.py`` turns it into lines.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Read(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


class InventoryPython(_Read):
    version: str = Field(..., pattern=r"^\d+\.\d+")
    implementation: str = "cpython"
    cache_tag: str | None = None
    soabi: str | None = None
    executable: str | None = None

    @property
    def minor(self) -> str:
        return ".".join(self.version.split(".")[:2])


class InventoryPlatform(_Read):
    system: str = "Linux"
    machine: str = ""
    libc: str = "unknown"
    libc_version: str = ""


class InventoryDist(_Read):
    name: str
    version: str
    top_level: list[str] = Field(default_factory=list)
    requires: list[str] = Field(default_factory=list)


class InventoryTorch(_Read):
    version: str = ""
    cuda: str | None = None
    hip: str | None = None
    cudnn: str | None = None


class ImageInventory(_Read):
    """One target's base Python: interpreter, platform, distributions."""

    format: int = 1
    created_at: float = 0.0
    j2c_version: str | None = None
    reads_manifest_format: int | None = Field(
        None,
        description="The newest manifest format the image's j2c-unpack reads; absent from a "
        "j2c-unpack older than shipped base packages (format 4), and from a probe.",
    )
    python: InventoryPython
    platform: InventoryPlatform
    site_dirs: list[str] = Field(default_factory=list)
    distributions: list[InventoryDist] = Field(default_factory=list)
    torch: InventoryTorch | None = None


class MissingDist(_Wire):
    name: str
    lab_version: str
    bytes: int = Field(..., description="Installed size in the lab (RECORD).")
    needed_by: list[str] = Field(
        ..., description="Why the job needs it: 'nbclient 0.10.2', 'imported by train.py'."
    )


class UnprovidedImport(_Wire):
    name: str = Field(..., description="A top-level module the entry's own code imports.")
    imported_by: list[str] = Field(..., description="The project's files importing it.")


class BrokenRequirement(_Wire):
    by: str = Field(..., description="The distribution whose requirement it is: 'scipy 1.17.1'.")
    requirement: str = Field(..., description="'numpy>=1.25.2'.")


class VersionDifference(_Wire):
    name: str
    lab_version: str
    image_version: str
    broken: list[BrokenRequirement] = Field(
        default_factory=list, description="Requirements of the job's packages the image's fails."
    )


class WheelMismatch(_Wire):
    name: str
    version: str
    tags: list[str]
    reason: str = Field(..., description="'needs glibc 2.38; the image has 2.36'.")


class ShadowRisk(_Wire):
    name: str
    venv_version: str
    image_version: str
    required_by: list[str] = Field(..., description="Image packages that depend on it.")
    broken: list[BrokenRequirement] = Field(
        default_factory=list, description="Their requirements the venv's version fails."
    )


BaseConflicts = Literal["auto", "ship", "image"]


class ShippedBase(_Wire):
    """Lab-base distributions that travel with the job as their own layer (image/base_layer.py):
    what ships, what does not and why."""

    enabled: bool = Field(..., description="pack.ship_base_packages and the job's choice.")
    off_reason: str | None = Field(
        None,
        description="Why nothing ships although the image lacks some: the setting, the "
        "flag, an image whose j2c-unpack is too old, a job without a venv.",
    )
    names: list[str] = Field(default_factory=list, description="'scipy 1.17.1', ...")
    bytes: int = Field(0, description="Their files' bytes (RECORD, without bytecode).")
    files: int = 0
    conflicts: BaseConflicts = "auto"
    shipped_conflicts: list[str] = Field(
        default_factory=list, description="Version differences shipped at the lab's version."
    )
    image_conflicts: list[str] = Field(
        default_factory=list, description="Version differences left at the image's version."
    )
    breaks_image: list[BrokenRequirement] = Field(
        default_factory=list,
        description="The image's own distributions' requirements a shipped version fails: an "
        "error unless the job confirms (force_base).",
    )
    forced: bool = False
    skipped_files: list[str] = Field(
        default_factory=list,
        description="RECORD files left out: outside site-packages (scripts, data, headers).",
    )
    note: str | None = Field(None, description="E.g. the image's j2c-unpack is not known yet.")


class ImageReport(_Wire):
    """The job's needs against its target's inventory (or why there is none yet)."""

    target: str = Field(..., description="What the job runs on: 'image X', 'slurm partition P'.")
    key: str = Field(..., description="The inventory's key in the data dir's image store.")
    known: bool
    source: Literal["probe", "job", "operator"] | None = None
    learned_at: float | None = None
    message: str | None = Field(None, description="Why nothing was compared, when so.")
    python: str | None = Field(
        None, description="The lab's and the image's Python, when they differ."
    )
    missing: list[MissingDist] = Field(default_factory=list)
    versions: list[VersionDifference] = Field(default_factory=list)
    wheels: list[WheelMismatch] = Field(default_factory=list)
    shadows: list[ShadowRisk] = Field(default_factory=list)
    unprovided: list[UnprovidedImport] = Field(
        default_factory=list,
        description="Imports of the entry's code that neither the venv, the lab's base nor "
        "the image provides (an optional one, inside try/except ImportError, is not counted).",
    )
    shipping: ShippedBase | None = Field(
        None, description="What of the lab's base ships with the job; None when nothing would."
    )
    seconds: float = 0.0
