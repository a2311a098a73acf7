"""Upload a pack result to an object store: missing layer and big-file blobs, then the manifest.

Blobs are content-addressed, so one already in the store (same key, same size) is never sent
again; the manifest (small) is written every time, which dates it by its last send (gc keeps
recent manifests and their blobs); it goes last, so a reader that finds it also finds every layer
it names. What the store holds is asked for every blob at once (bounded): over a real network a
send is a few round trips, not one per part (a one-line edit of a 14-part code layer asked ~19
times in a row before).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from j2c_server.pack.models import PackResult
from j2c_server.storage.base import ObjectStore, ProgressFn, blob_key, file_blob_key, manifest_key
from j2c_server.wire.manifest import LayerRole, Manifest

CONCURRENT_CHECKS = 16  # existence checks in flight: one round trip for a typical send


class PublishResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    manifest_uri: str
    manifest_key: str
    manifest_digest: str
    bytes_uploaded: int = Field(
        ...,
        description="Layer, big-file and new-manifest bytes sent (0 when all were there).",
    )
    manifest_size: int = Field(0, ge=0, description="The manifest's bytes.")
    manifest_uploaded: bool = Field(..., description="False when the same manifest was there.")
    uploaded: list[LayerRole]
    already_present: list[LayerRole]
    files_uploaded: list[str] = Field(
        default_factory=list, description="Big files sent (paths in the code layer)."
    )
    files_present: int = Field(0, description="Big files already in the store.")


async def publish(
    store: ObjectStore,
    result: PackResult,
    manifest: Manifest,
    progress: ProgressFn | None = None,
) -> PublishResult:
    """Upload what the store lacks; ``progress`` gets the layer bytes moved since its last call."""
    layers = [(blob_key(p.layer.digest), p.path, p.layer.size) for p in result.layers]
    files = [(file_blob_key(p.file.digest), p.path, p.file.size) for p in result.files]
    body = manifest.canonical_json()
    digest = manifest.digest()
    key = manifest_key(digest)
    checks = asyncio.Semaphore(CONCURRENT_CHECKS)

    async def stored_size(blob: str) -> int | None:
        async with checks:
            return await store.size(blob)

    sizes = await asyncio.gather(
        *(stored_size(k) for k, _, _ in [*layers, *files]), stored_size(key)
    )
    have = dict(zip([k for k, _, _ in [*layers, *files]], sizes[:-1], strict=True))

    async def send(blob: str, path: Path, size: int) -> bool:
        """Sent (True) or there already; ``put_file`` checks once more for a missing one."""
        return have.get(blob) != size and await store.put_file(blob, path, progress=progress)

    sent = 0
    uploaded: list[LayerRole] = []
    present: list[LayerRole] = []
    for (blob, path, size), packed in zip(layers, result.layers, strict=True):
        if await send(blob, path, size):
            sent += size
            uploaded.append(packed.layer.role)
        else:
            present.append(packed.layer.role)
    files_sent: list[str] = []
    files_present = 0
    for (blob, path, size), packed_file in zip(files, result.files, strict=True):
        if await send(blob, path, size):
            sent += size
            files_sent.append(packed_file.file.path)
        else:
            files_present += 1
    manifest_uploaded = sizes[-1] != len(body)
    # Written even when there (a few kB): its date is then its last send's, which is what
    # ``j2c gc``'s age rule protects (a job of another lab sharing the store, say).
    await store.put_bytes(key, body)
    if manifest_uploaded:
        sent += len(body)
    return PublishResult(
        manifest_uri=store.uri(key),
        manifest_key=key,
        manifest_digest=digest,
        bytes_uploaded=sent,
        manifest_uploaded=manifest_uploaded,
        manifest_size=len(body),
        uploaded=uploaded,
        already_present=present,
        files_uploaded=files_sent,
        files_present=files_present,
    )
