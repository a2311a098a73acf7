"""Turn a pack result into the content-addressed ``manifest.json`` that ``j2c-unpack`` reads."""

from __future__ import annotations

import time
from pathlib import PurePosixPath

from .. import __version__
from ..models import MANIFEST_FORMAT_VERSION, MANIFEST_FORMAT_VERSION_BASE, EntryPoint, Manifest
from .models import PackResult


def make_manifest(
    result: PackResult,
    *,
    args: list[str] | None = None,
    env: dict[str, str] | None = None,
    source_image: str | None = None,
    created_at: float | None = None,
) -> Manifest:
    """The manifest for ``result``; pass ``created_at`` to make its digest reproducible.
    Format version 2 only when it lists big files: without them, an older j2c-unpack reads it."""
    files = [packed.file for packed in result.files] or None
    return Manifest(
        format_version=MANIFEST_FORMAT_VERSION if files else MANIFEST_FORMAT_VERSION_BASE,
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
    )


def entry_workdir(entry: EntryPoint) -> str:
    """Where the entry runs, relative to the code layer: a notebook in its own folder, as
    JupyterLab runs it (relative paths in notebooks assume that); scripts and modules at the
    project root, as users launch them from there."""
    if entry.kind == "notebook":
        return str(PurePosixPath(entry.target).parent)
    return "."
