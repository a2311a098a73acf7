"""Helpers of the j2c-unpack tests.

- :func:`publish_project`: pack a real project (and venv) with the real packer and publish it to a
  ``file://`` store, as ``j2c build`` does; returns the manifest's URI.
- :func:`run_unpack`: run ``j2c-unpack`` as a real subprocess (``python -m j2c_server.unpack``).
- :func:`write_layer` / :func:`publish_layers`: hand-made layers (the malicious corpus), written
  with tarfile + zstandard, and a manifest for them in a ``file://`` store.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import subprocess
import sys
import tarfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import zstandard

from j2c_server.pack import PackSpec, make_manifest, pack, publish
from j2c_server.storage import open_store
from j2c_server.wire.manifest import EntryPoint, Layer, LayerRole, Manifest, VenvInfo

OLD_MTIME = 1_700_000_000
UNPACK = [sys.executable, "-m", "j2c_server.unpack"]
PYTHON_VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"


def publish_project(
    project: Path,
    store: Path,
    call_path: str,
    *,
    venv: Path | None = None,
    args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    edit: Callable[[Manifest], Manifest] | None = None,
    code_part_bytes: int | None = None,
) -> str:
    """Pack ``project`` (+ ``venv``) and publish it to the store folder; the manifest URI.
    ``code_part_bytes``: the code layer's part size (None: the default; 0: one code layer)."""
    spec = PackSpec(code_path=project, call_path=call_path, venv_path=venv)
    if code_part_bytes is not None:
        spec = spec.model_copy(update={"code_part_bytes": code_part_bytes})
    result = pack(spec, store.parent / f"{store.name}-cache")
    manifest = make_manifest(result, args=list(args), env=env)
    if edit is not None:
        manifest = edit(manifest)
    published = asyncio.run(publish(open_store(store.as_uri()), result, manifest))
    return published.manifest_uri


def run_unpack(
    manifest_uri: str,
    *options: str,
    user_args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    timeout: float = 180,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*UNPACK, manifest_uri, *options, "--", *user_args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


def blob_path(store: Path, digest: str) -> Path:
    return store / "blobs" / "sha256" / f"{digest.removeprefix('sha256:')}.tar.zst"


# --------------------------------------------------------------------------- hand-made layers


@dataclass(frozen=True)
class Entry:
    """One tar entry; ``kind`` is file, dir, symlink, hardlink, chr, blk or fifo."""

    name: str
    kind: str = "file"
    data: bytes = b""
    target: str = ""
    mode: int = 0o644


_TYPES = {
    "file": tarfile.REGTYPE,
    "dir": tarfile.DIRTYPE,
    "symlink": tarfile.SYMTYPE,
    "hardlink": tarfile.LNKTYPE,
    "chr": tarfile.CHRTYPE,
    "blk": tarfile.BLKTYPE,
    "fifo": tarfile.FIFOTYPE,
}


def write_layer(path: Path, entries: Sequence[Entry]) -> Path:
    """A tar.zst holding exactly ``entries`` (no checks: this writes the malicious ones too)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for entry in entries:
            info = tarfile.TarInfo(entry.name)
            info.type = _TYPES[entry.kind]
            info.mode = entry.mode
            info.mtime = OLD_MTIME
            info.linkname = entry.target
            if entry.kind == "file":
                info.size = len(entry.data)
            archive.addfile(info, io.BytesIO(entry.data) if entry.kind == "file" else None)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(zstandard.ZstdCompressor().compress(raw.getvalue()))
    return path


def layer_of(blob: Path, role: LayerRole, source_path: str) -> Layer:
    data = blob.read_bytes()
    return Layer(
        role=role,
        digest="sha256:" + hashlib.sha256(data).hexdigest(),
        size=len(data),
        source_path=source_path,
    )


def publish_layers(
    store: Path,
    layers: dict[LayerRole, Sequence[Entry]],
    *,
    entry: EntryPoint,
    source_root: str,
    python_version: str = PYTHON_VERSION,
) -> str:
    """Write the layers and their manifest into a file store; the manifest URI."""
    models = []
    for role, entries in layers.items():
        blob = write_layer(store / "incoming" / f"{role.value}.tar.zst", entries)
        layer = layer_of(blob, role, f"{source_root}/{role.value}")
        target = blob_path(store, layer.digest)
        target.parent.mkdir(parents=True, exist_ok=True)
        blob.rename(target)
        models.append(layer)
    manifest = Manifest(
        created_by="j2c tests",
        created_at=float(OLD_MTIME),
        layers=models,
        entry=entry,
        venv=VenvInfo(python_version=python_version, home="/usr/bin")
        if LayerRole.venv in layers
        else None,
    )
    digest = manifest.digest().removeprefix("sha256:")
    path = store / "manifests" / "sha256" / f"{digest}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(manifest.canonical_json())
    return path.as_uri()
