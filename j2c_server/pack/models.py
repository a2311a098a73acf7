"""The packer's public shapes: what callers ask for (``PackSpec``) and what they get back.

``PackPlan`` (preflight) and ``PackResult`` (pack) are shown by the UI and printed by the CLI,
so they stay JSON-friendly pydantic models; ``PackProgress`` is a small dataclass because it is
created many times per second while a layer is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from j2c_server.config import PackSettings
from j2c_server.wire.image import ImageReport
from j2c_server.wire.manifest import EntryPoint, FileBlob, JobNeeds, Layer, LayerRole, VenvInfo

MIB = 1024 * 1024


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PackSpec(_Model):
    """What to pack and how. Paths may be relative to the current directory."""

    code_path: Path = Field(..., description="Project folder: the code layer's root.")
    call_path: str = Field(
        ...,
        min_length=1,
        description="Entry point: a .py script or .ipynb notebook in the project "
        "(relative to it, or absolute), or '-m package.module'.",
    )
    venv_path: Path | None = Field(None, description="Virtual environment: the venv layer.")
    excludes: list[str] = Field(
        default_factory=list, description="Extra gitignore patterns for the code layer."
    )
    includes: list[str] = Field(
        default_factory=list,
        description="Project-relative paths to ship although a default rule (secrets, junk, "
        "ignore files) leaves them out.",
    )
    compression_level: int = Field(3, ge=1, le=22)
    threads: int = Field(0, ge=-1, description="zstd worker threads; 0 or -1 = one per core.")
    soft_limit_bytes: int = Field(2048 * MIB, ge=1, description="Warn above this total size.")
    hard_limit_bytes: int = Field(20480 * MIB, ge=1, description="Refuse above this total size.")
    layer_cache_max_bytes: int = Field(
        2048 * MIB, ge=0, description="The lab's layer cache is pruned (LRU) above this."
    )
    layer_cache_keep_sends: int = Field(
        2, ge=0, description="Sends per project whose blobs the layer cache always keeps."
    )
    big_file_bytes: int = Field(
        MIB,
        ge=0,
        description="Code files of at least this size travel as their own blobs (0: never).",
    )
    code_part_bytes: int = Field(
        256 * 1024,
        ge=0,
        description="Target uncompressed bytes of one code layer part (0: one code layer).",
    )
    args: list[str] = Field(default_factory=list, description="Arguments for the entry point.")
    source_image: str | None = None
    never_pack: list[Path] = Field(
        default_factory=list,
        description="Folders or files never packed, whatever includes say (j2c's own data dir).",
    )
    secret_scan_cache: Path | None = Field(
        None,
        description="Folder where content-scan verdicts are kept between scans, so an "
        "unchanged venv is not re-read (None: read every scan).",
    )

    watch_venv: bool = Field(
        True,
        description="A long-lived process keeps the venv's scan while a file-system watch "
        "sees no change under it (see docs/packing.md); False walks it on every send.",
    )

    @classmethod
    def from_settings(cls, settings: PackSettings, **fields: Any) -> PackSpec:
        """A spec whose compression, threads and limits default to ``J2CSettings.pack``;
        fields given as None keep those defaults."""
        defaults = {
            "compression_level": settings.compression_level,
            "threads": settings.threads,
            "soft_limit_bytes": settings.soft_limit_mb * MIB,
            "hard_limit_bytes": settings.hard_limit_mb * MIB,
            "layer_cache_max_bytes": settings.layer_cache_max_mb * MIB,
            "layer_cache_keep_sends": settings.layer_cache_keep_sends,
            "big_file_bytes": int(settings.big_file_mb * MIB),
            "code_part_bytes": settings.code_part_kb * 1024,
            "watch_venv": settings.watch_venv,
        }
        given = {key: value for key, value in fields.items() if value is not None}
        return cls.model_validate({**defaults, **given})


class ExcludeRule(str, Enum):
    """Why a path was left out of a layer."""

    default = "default"  # built-in junk: .git, __pycache__, .ipynb_checkpoints, .DS_Store, ...
    secret = "secret"  # noqa: S105 - by name or content (opt back in with includes)
    gitignore = ".gitignore"
    j2cignore = ".j2cignore"
    exclude = "exclude"  # the caller's own excludes patterns
    venv = "venv"  # the shipped venv, nested in the project: it is the venv layer
    nested_venv = "nested_venv"  # another virtual environment inside the project
    cache_dir = "cache_dir"  # a folder tagged with CACHEDIR.TAG
    symlink_escape = "symlink_escape"  # a symlink pointing outside its layer (not followed)
    special_file = "special_file"  # socket, FIFO or device
    bad_name = "bad_name"  # a file name that is not valid UTF-8
    j2c_data = "j2c_data"  # j2c's own data directory (registry, store, layer cache, runs)


class ExcludedGroup(_Model):
    """The paths one rule left out of one layer (directories count once, not their contents)."""

    layer: LayerRole
    rule: ExcludeRule
    count: int
    paths: list[str] = Field(..., description="The first paths, sorted; at most 100.")
    reasons: dict[str, str] = Field(
        default_factory=dict,
        description="Why a listed path matched, where the rule has several reasons (secrets: "
        '"name \'.env*\'", "private key block", "GitHub token", ...).',
    )


class PackWarning(_Model):
    code: str = Field(..., description="Stable identifier, e.g. 'shadowed_package'.")
    message: str
    path: str | None = None


class PathSize(_Model):
    path: str
    bytes: int


class LayerPlan(_Model):
    role: LayerRole
    source_path: str
    files: int = Field(..., description="Regular files.")
    entries: int = Field(..., description="Archive entries: files, directories and symlinks.")
    bytes: int = Field(..., description="Bytes of regular files before compression.")
    largest: list[PathSize] = Field(..., description="The 10 largest files.")


class PackPlan(_Model):
    """What ``pack`` would do, computed without writing anything."""

    layers: list[LayerPlan]
    entry: EntryPoint
    venv: VenvInfo | None
    excluded: list[ExcludedGroup]
    warnings: list[PackWarning]
    big_files: list[PathSize] = Field(
        default_factory=list,
        description="Code files that travel as their own blobs (at least pack.big_file_mb): "
        "sent once, not again when other files change.",
    )
    total_bytes: int
    soft_limit_bytes: int
    hard_limit_bytes: int
    refused: str | None = Field(None, description="Why pack() would refuse (hard limit).")
    image_report: ImageReport | None = Field(
        None,
        description="What the job needs that its target's image lacks or has at another "
        "version (j2c_server.image); None when not checked (the packer alone, a local job).",
    )


class PackedLayer(_Model):
    layer: Layer
    path: Path = Field(..., description="The blob in the cache directory.")
    reused: bool = Field(..., description="Recognised by fingerprint: nothing was read or written.")
    seconds: float


class PackedFile(_Model):
    """A big file of the code layer: its own blob in the cache (a copy, so that editing the
    file cannot change a blob being uploaded)."""

    file: FileBlob
    path: Path = Field(..., description="The blob in the cache directory.")
    reused: bool = Field(..., description="Recognised by its stat: not read again.")


class PackResult(_Model):
    layers: list[PackedLayer]
    files: list[PackedFile] = Field(default_factory=list, description="Big files, as blobs.")
    entry: EntryPoint
    venv: VenvInfo | None
    warnings: list[PackWarning]
    excluded: list[ExcludedGroup]
    seconds: float
    needs: JobNeeds | None = Field(
        None, description="What the job needs of a target not known yet (image/job_needs.py)."
    )

    def layer(self, role: LayerRole) -> PackedLayer | None:
        return next((packed for packed in self.layers if packed.layer.role == role), None)

    def code_parts(self) -> list[PackedLayer]:
        """The code layer's parts, in order (one unless the small files were split)."""
        return [packed for packed in self.layers if packed.layer.role == LayerRole.code]


@dataclass(frozen=True)
class PackProgress:
    """Progress of one layer; reported from the packing thread, at most ~10 times a second."""

    role: LayerRole
    files_done: int
    files_total: int
    bytes_done: int
    bytes_total: int
    reused: bool = False
