"""Upload a pack result to an object store: missing layer and big-file blobs, then the manifest.

Blobs are content-addressed, so one already in the store (same key, same size) is never sent
again; the manifest (small) is written every time, which dates it by its last send (gc keeps
recent manifests and their blobs); it goes last, so a reader that finds it also finds every layer
it names. Every blob is asked for (HEAD) on every send, all at once (bounded), and a missing one
goes up as soon as its own answer comes, while the others are still being asked: over a real
network a send is a few round trips, not one per part. The blobs the previous sends to the same
store found or sent are asked last, so the new ones (a one-line edit's code part) are asked and
sent first; the memory only orders the checks, it never skips one (a blob deleted from the store
since is sent again before the manifest).
"""

from __future__ import annotations

import asyncio
import weakref
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from j2c_server.pack.models import PackResult
from j2c_server.storage.base import ObjectStore, ProgressFn, blob_key, file_blob_key, manifest_key
from j2c_server.wire.manifest import LayerRole, Manifest

CONCURRENT_CHECKS = 16  # existence checks in flight: one round trip for a typical send
CONCURRENT_SENDS = 4  # blobs going up at once (a multipart blob has its own parts in flight)
REMEMBERED_BLOBS = 10_000  # per store: the keys the latest sends found or sent (LRU)

# Per store object (a server keeps its clients): blob key -> size, oldest first.
_seen: weakref.WeakKeyDictionary[ObjectStore, dict[str, int]] = weakref.WeakKeyDictionary()


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
    blobs = [*layers, *files]
    body = manifest.canonical_json()
    digest = manifest.digest()
    key = manifest_key(digest)
    seen = _seen.setdefault(store, {})
    checks = asyncio.Semaphore(CONCURRENT_CHECKS)
    sends = asyncio.Semaphore(CONCURRENT_SENDS)

    async def stored_size(blob: str) -> int | None:
        async with checks:
            return await store.size(blob)

    async def ensure(blob: str, path: Path, size: int) -> bool:
        """Sent (True) or there already, asked once."""
        if await stored_size(blob) == size:
            return False
        async with sends:
            return await store.put_file(blob, path, progress=progress, checked=True)

    # One task per key (two big files of one content share a blob). Tasks start in this
    # order, and the semaphore serves them in it: blobs no earlier send saw first.
    first = {blob: i for i, (blob, _, _) in reversed(list(enumerate(blobs)))}
    known = {i for i in first.values() if seen.get(blobs[i][0]) == blobs[i][2]}
    tasks = {
        i: asyncio.ensure_future(ensure(*blobs[i]))
        for i in sorted(first.values())
        if i not in known
    }
    manifest_size = asyncio.ensure_future(stored_size(key))
    tasks.update({i: asyncio.ensure_future(ensure(*blobs[i])) for i in sorted(known)})
    try:
        outcome = [
            await tasks[i] if i in tasks else False  # a repeated key: sent (or not) once
            for i in range(len(blobs))
        ]
        manifest_uploaded = await manifest_size != len(body)
    except BaseException:
        for task in [*tasks.values(), manifest_size]:
            task.cancel()
        await asyncio.gather(*tasks.values(), manifest_size, return_exceptions=True)
        raise
    for blob, _, size in blobs:
        seen.pop(blob, None)
        seen[blob] = size
    for old in list(seen)[: max(0, len(seen) - REMEMBERED_BLOBS)]:
        del seen[old]

    sent = 0
    uploaded: list[LayerRole] = []
    present: list[LayerRole] = []
    for was_sent, (_, _, size), packed in zip(outcome, layers, result.layers, strict=False):
        if was_sent:
            sent += size
            uploaded.append(packed.layer.role)
        else:
            present.append(packed.layer.role)
    files_sent: list[str] = []
    files_present = 0
    for was_sent, (_, _, size), packed_file in zip(
        outcome[len(layers) :], files, result.files, strict=True
    ):
        if was_sent:
            sent += size
            files_sent.append(packed_file.file.path)
        else:
            files_present += 1
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
