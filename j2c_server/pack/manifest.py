"""Turn a pack result into the content-addressed ``manifest.json`` that ``j2c-unpack`` reads."""

from __future__ import annotations

import time
from pathlib import PurePosixPath

from j2c_server.core.version import __version__
from j2c_server.pack.models import PackResult
from j2c_server.wire.manifest import (
    MANIFEST_FORMAT_VERSION_BASE,
    MANIFEST_FORMAT_VERSION_FILES,
    MANIFEST_FORMAT_VERSION_NEEDS,
    MANIFEST_FORMAT_VERSION_PARTS,
    MANIFEST_FORMAT_VERSION_SHIPPED_BASE,
    EntryPoint,
    LayerRole,
    Manifest,
)


def make_manifest(
    result: PackResult,
    *,
    args: list[str] | None = None,
    env: dict[str, str] | None = None,
    source_image: str | None = None,
    created_at: float | None = None,
) -> Manifest:
    """The manifest for ``result``; pass ``created_at`` to make its digest reproducible.
    Format version 6 only when it carries what the job needs (``result.needs``), 4 when
    lab-base packages ship (``base`` layers), 3 when the code layer
    has several parts, 2 when it lists big files: otherwise 1, so that an older j2c-unpack reads
    what it can (and refuses what it cannot)."""
    files = [packed.file for packed in result.files] or None
    version = MANIFEST_FORMAT_VERSION_BASE
    if result.needs is not None:
        version = MANIFEST_FORMAT_VERSION_NEEDS
    elif any(packed.layer.role == LayerRole.base for packed in result.layers):
        version = MANIFEST_FORMAT_VERSION_SHIPPED_BASE
    elif len(result.code_parts()) > 1:
        version = MANIFEST_FORMAT_VERSION_PARTS
    elif files:
        version = MANIFEST_FORMAT_VERSION_FILES
    return Manifest(
        format_version=version,
        created_by=f"j2c {__version__}",
        created_at=time.time() if created_at is None else created_at,
        layers=[packed.layer for packed in result.layers],
        entry=result.entry,
        args=list(args or []),
        env=dict(env or {}),
        venv=result.venv,
        source_image=source_image,
        workdir=entry_workdir(result.entry),
        files=files,
        needs=result.needs,
    )


def entry_workdir(entry: EntryPoint) -> str:
    """Where the entry runs, relative to the code layer: a notebook in its own folder, as
    JupyterLab runs it (relative paths in notebooks assume that); scripts and modules at the
    project root, as users launch them from there."""
    if entry.kind == "notebook":
        return str(PurePosixPath(entry.target).parent)
    return "."
