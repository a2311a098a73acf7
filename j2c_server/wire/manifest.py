"""The manifest's pydantic models: what ``j2c-unpack`` validates before it runs anything.

The packer writes these and the job reads them; the job and API shapes that hold a manifest live
in ``wire.api``. Only pydantic, the standard library and ``core.manifest_plan`` (the manifest's
pydantic-free copy a warm start runs on, which defines ``LayerRole``) are imported here.
"""

from __future__ import annotations

import hashlib
import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

# Re-exported: defined beside the manifest plan, which j2c-unpack imports without pydantic.
from j2c_server.core.manifest_plan import LayerRole as LayerRole

MANIFEST_FORMAT_VERSION = 7  # the newest written and read; 7: a variant's ``retries``
MANIFEST_FORMAT_VERSION_RETRIES = 7  # a variant's ``retries``: an older reader would not re-run
MANIFEST_FORMAT_VERSION_NEEDS = 6  # ``needs``: an older reader would refuse the unknown field
MANIFEST_FORMAT_VERSION_VARIANTS = 5  # ``variants``: an older reader would run the base args
MANIFEST_FORMAT_VERSION_SHIPPED_BASE = 4  # ``base`` layers: an older reader would not place them
MANIFEST_FORMAT_VERSION_PARTS = 3  # several ``code`` layers: an older reader would miss files
MANIFEST_FORMAT_VERSION_FILES = 2  # 2: big files as their own blobs (``Manifest.files``)
MANIFEST_FORMAT_VERSION_BASE = 1  # written when a manifest has no ``files``: older readers work
LAYER_MEDIA_TYPE = "application/vnd.j2c.layer.v1.tar+zstd"
MAX_VARIANT_RETRIES = 10
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


def _check_digest(value: str) -> str:
    if not DIGEST_RE.match(value):
        raise ValueError("digest must be 'sha256:' followed by 64 lowercase hex digits")
    return value


Digest = Annotated[str, AfterValidator(_check_digest)]


class Strict(BaseModel):
    """Unknown fields are errors: a typo in a request must not be silently ignored."""

    model_config = ConfigDict(extra="forbid")


class Layer(Strict):
    """One content-addressed tar.zst layer."""

    role: LayerRole
    digest: Digest = Field(..., description="'sha256:<hex>' of the compressed blob.")
    size: int = Field(..., ge=0, description="Compressed bytes.")
    files: int = Field(0, ge=0, description="Entries in the archive.")
    unpacked_size: int = Field(0, ge=0, description="Bytes of regular files before compression.")
    source_path: str = Field(..., description="Absolute path the layer was packed from.")
    media_type: str = LAYER_MEDIA_TYPE
    url: str | None = Field(
        None,
        description="Where to fetch the blob (e.g. a presigned URL); when absent it is resolved "
        "next to the manifest in the same store.",
    )


class FileBlob(Strict):
    """One big file of the code layer, shipped as its own content-addressed blob (the file's
    bytes, uncompressed), so an edit elsewhere in the project does not send it again."""

    path: str = Field(..., description="'/'-separated path relative to the code layer's root.")
    digest: Digest = Field(..., description="'sha256:<hex>' of the file's bytes.")
    size: int = Field(..., ge=0)
    mode: int = Field(0o644, ge=0, le=0o777, description="Permission bits.")
    url: str | None = Field(
        None, description="Where to fetch it; when absent, next to the manifest in its store."
    )


class EntryPoint(Strict):
    """What to run, relative to the code layer's root."""

    kind: Literal["script", "module", "notebook"]
    target: str = Field(..., description="Relative path (script, notebook) or module name.")

    def describe(self) -> str:
        return f"-m {self.target}" if self.kind == "module" else self.target


class VenvInfo(Strict):
    """Facts about the shipped venv that ``j2c-unpack`` needs before it runs anything."""

    python_version: str = Field(..., description="major.minor of the venv's interpreter.")
    home: str = Field(..., description="pyvenv.cfg 'home': the base interpreter's bin folder.")
    include_system_site_packages: bool = True
    prompt: str | None = None


class Variant(Strict):
    """One row of a sweep's variant table: the job picks its row by index (format_version 5)."""

    index: int = Field(..., ge=0)
    args: list[str] = Field(..., description="The variant's arguments (replace the base args).")
    env: dict[str, str] = Field(
        default_factory=dict, description="Set over the manifest's env for this variant."
    )
    params: dict[str, str] = Field(
        default_factory=dict, description="Each swept name with its value (for the log)."
    )
    retries: int | None = Field(
        None,
        ge=1,
        le=MAX_VARIANT_RETRIES,
        description="Re-runs of the entry point in place while it exits non-zero (never after "
        "a signal); absent: none (format_version 7).",
    )


class NeededRequirement(Strict):
    """One requirement the job's packages put on a distribution of the base."""

    by: str = Field(..., description="Who requires it: 'scipy 1.17.1'.")
    specifier: str = Field(
        ..., description="Its version specifier ('>=1.25.2,<2.7'; '' for any), markers evaluated."
    )


class NeededDist(Strict):
    """A distribution the job takes from its base Python (not in the venv, not shipped)."""

    name: str
    version: str = Field(..., description="The lab's version.")
    why: list[str] = Field(..., description="'imported by train.py', 'nbclient 0.11.0'.")
    requirements: list[NeededRequirement] = Field(default_factory=list)


class NeededWheel(Strict):
    """A compiled wheel of the venv, by the tags it was built for."""

    name: str
    version: str
    tags: list[str]


class JobNeeds(Strict):
    """What the job needs of the Python it runs on, computed in the lab (image/job_needs.py) for a
    target the lab knows nothing of yet; ``j2c-unpack`` checks it before the entry point
    (unpack/needs.py) and lists every gap at once (format_version 6)."""

    python: str = Field(..., description="major.minor the job's venv (or the lab) was made with.")
    lab_libc: str | None = Field(None, description="The lab's glibc: 'linux_*' wheels need it.")
    dists: list[NeededDist] = Field(default_factory=list)
    wheels: list[NeededWheel] = Field(default_factory=list)


class Manifest(Strict):
    """manifest.json: everything ``j2c-unpack`` needs, content-addressed itself."""

    format_version: int = MANIFEST_FORMAT_VERSION_BASE
    created_by: str
    created_at: float = Field(..., description="Unix time.")
    layers: list[Layer]
    entry: EntryPoint
    args: list[str] = Field(default_factory=list)
    workdir: str = Field(".", description="Working directory relative to the code layer.")
    env: dict[str, str] = Field(default_factory=dict)
    venv: VenvInfo | None = None
    source_image: str | None = None
    files: list[FileBlob] | None = Field(
        None,
        description="Big files of the code layer, each its own blob, placed into the code "
        "folder after extraction (format_version 2).",
    )
    variants: list[Variant] | None = Field(
        None,
        description="A sweep's variant table, row i at index i; the job runs the row its "
        "command line names (format_version 5).",
    )
    needs: JobNeeds | None = Field(
        None,
        description="What the job needs of its base Python, checked by the job before its entry "
        "point when the lab did not know the target (format_version 6).",
    )

    def layer(self, role: LayerRole) -> Layer | None:
        """The first layer of ``role``: the venv, or the code layer's first part."""
        return next((layer for layer in self.layers if layer.role == role), None)

    def code_layers(self) -> list[Layer]:
        """The code layer's parts, in extraction order (several from format_version 3)."""
        return [layer for layer in self.layers if layer.role == LayerRole.code]

    def base_layers(self) -> list[Layer]:
        """The shipped lab-base packages, one layer per lab site folder (format_version 4)."""
        return [layer for layer in self.layers if layer.role == LayerRole.base]

    def canonical_json(self) -> bytes:
        """Stable bytes: the same manifest always hashes to the same digest."""
        return self.model_dump_json(exclude_none=True).encode() + b"\n"

    def digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.canonical_json()).hexdigest()
