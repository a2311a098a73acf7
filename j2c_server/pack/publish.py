"""Upload a pack result to an object store: missing layer and big-file blobs, then the manifest.

Blobs are content-addressed, so one already in the store (same key, same size) is never sent
again; the manifest (small) is written every time, which dates it by its last send (gc keeps
recent manifests and their blobs); it goes last, so a reader that finds it also finds every layer
it names.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ..models import LayerRole, Manifest
from ..storage.base import ObjectStore, ProgressFn, blob_key, file_blob_key, manifest_key
from .models import PackResult


class PublishResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    manifest_uri: str
    manifest_key: str
    manifest_digest: str
    bytes_uploaded: int = Field(
        ..., description="Layer and big-file bytes sent (0 when all were there)."
    )
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
    sent = 0
    uploaded: list[LayerRole] = []
    present: list[LayerRole] = []
    for packed in result.layers:
        layer = packed.layer
        if await store.put_file(blob_key(layer.digest), packed.path, progress=progress):
            sent += layer.size
            uploaded.append(layer.role)
        else:
            present.append(layer.role)
    files_sent: list[str] = []
    files_present = 0
    for packed_file in result.files:
        blob = packed_file.file
        if await store.put_file(file_blob_key(blob.digest), packed_file.path, progress=progress):
            sent += blob.size
            files_sent.append(blob.path)
        else:
            files_present += 1
    body = manifest.canonical_json()
    digest = manifest.digest()
    key = manifest_key(digest)
    manifest_uploaded = await store.size(key) != len(body)
    # Written even when there (a few kB): its date is then its last send's, which is what
    # ``j2c gc``'s age rule protects (a job of another lab sharing the store, say).
    await store.put_bytes(key, body)
    return PublishResult(
        manifest_uri=store.uri(key),
        manifest_key=key,
        manifest_digest=digest,
        bytes_uploaded=sent,
        manifest_uploaded=manifest_uploaded,
        uploaded=uploaded,
        already_present=present,
        files_uploaded=files_sent,
        files_present=files_present,
    )
