"""Garbage collection of a store: which blobs and manifests ``j2c gc`` removes, and which never.

Kept, whatever their age:

- every manifest a job record names (``JobRecord.manifest_uri``, in any state: queued, running,
  finished or failed, until the job is removed from the registry), and the job's resolved
  manifest (``jobs/<id>/manifest.json``);
- every manifest and blob written less than ``older_than`` ago: a send uploading right now (its
  blobs go up before its manifest), or another lab's recent job this registry does not know;
- every blob (layer or big file) that a kept manifest names.

Removed: the other objects under ``blobs/`` and ``manifests/``, and the resolved manifests of jobs
no longer in the registry. Manifests go before blobs, so a reader never finds a manifest whose
blob is gone. Outputs (``jobs/<id>/outputs/``) are never touched. A kept manifest that cannot be
read stops the collection before anything is removed: it might name any blob. Multipart uploads
abandoned half-way are not objects; the bucket's lifecycle rule removes them (docs/operators.md).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from j2c_server.core.errors import StorageError
from j2c_server.storage.base import ObjectStore, StoredObject, blob_key, file_blob_key
from j2c_server.wire.manifest import DIGEST_RE

_MANIFEST_KEY = re.compile(r"manifests/sha256/[0-9a-f]{64}\.json")
_JOB_MANIFEST = re.compile(r"^jobs/(?P<id>[^/]+)/manifest\.json$")
Kind = Literal["manifest", "job manifest", "layer", "big file", "other blob"]


class GcItem(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str
    kind: Kind
    bytes: int
    age_days: float


class GcReport(BaseModel):
    """What a collection removed (or, with ``dry_run``, would remove) and what it kept."""

    model_config = ConfigDict(extra="forbid")

    store: str
    dry_run: bool
    older_than_s: float
    removed: list[GcItem] = Field(default_factory=list)
    bytes_freed: int = Field(0, description="Bytes removed (or that would be).")
    kept_manifests: int = 0
    kept_blobs: int = 0
    kept_bytes: int = 0


def referenced_manifest(uri: str | None) -> str | None:
    """The store key a job record's manifest URI names (``manifests/sha256/<hex>.json``),
    whatever the URI's scheme or query."""
    if not uri:
        return None
    found = _MANIFEST_KEY.search(uri)
    return found.group(0) if found else None


def _blob_kind(key: str) -> Kind:
    if key.endswith(".tar.zst"):
        return "layer"
    if key.endswith(".file"):
        return "big file"
    return "other blob"


def _named_blobs(raw: Any) -> set[str]:
    """The blob keys a manifest's JSON names (read leniently: a newer format's extra fields
    do not hide its layers)."""
    keys: set[str] = set()
    if not isinstance(raw, dict):
        return keys
    for field, key_of in (("layers", blob_key), ("files", file_blob_key)):
        for item in raw.get(field) or []:
            digest = item.get("digest") if isinstance(item, dict) else None
            if isinstance(digest, str) and DIGEST_RE.match(digest):
                keys.add(key_of(digest))
    return keys


async def collect_garbage(
    store: ObjectStore,
    jobs: Iterable[tuple[str, str | None]],
    *,
    older_than_s: float,
    dry_run: bool,
    now: float | None = None,
    label: str = "",
) -> GcReport:
    """Remove what nothing references from ``store``; ``jobs`` are the registry's (job id,
    manifest URI) pairs; ``label`` names the store in the report. Raises StorageError,
    removing nothing, when a kept manifest cannot be read."""
    now = time.time() if now is None else now
    job_ids: set[str] = set()
    named: set[str] = set()
    for job_id, manifest_uri in jobs:
        job_ids.add(job_id)
        if (key := referenced_manifest(manifest_uri)) is not None:
            named.add(key)

    def old(item: StoredObject) -> bool:
        return now - item.modified >= older_than_s

    manifests = await store.list_objects("manifests/")
    job_files = [o for o in await store.list_objects("jobs/") if _JOB_MANIFEST.match(o.key)]
    blobs = await store.list_objects("blobs/")

    doomed: list[tuple[StoredObject, Kind]] = []
    kept: list[StoredObject] = []
    for item in manifests:
        if item.key in named or not old(item):
            kept.append(item)
        else:
            doomed.append((item, "manifest"))
    for item in job_files:
        match = _JOB_MANIFEST.match(item.key)
        assert match is not None
        if match["id"] in job_ids or not old(item):
            kept.append(item)
        else:
            doomed.append((item, "job manifest"))

    needed: set[str] = set()
    for item in kept:
        try:
            raw = json.loads(await store.get_bytes(item.key))
        except ValueError as exc:
            raise StorageError(
                f"gc stopped before removing anything: the kept manifest {store.uri(item.key)} "
                f"is not JSON ({exc}), so the blobs it names are unknown",
                field="manifest",
                hint="remove or repair that manifest, then run gc again",
            ) from None
        needed |= _named_blobs(raw)

    kept_blobs = [item for item in blobs if item.key in needed or not old(item)]
    kept_keys = {item.key for item in kept_blobs}
    doomed += [(item, _blob_kind(item.key)) for item in blobs if item.key not in kept_keys]

    report = GcReport(
        store=label,
        dry_run=dry_run,
        older_than_s=older_than_s,
        kept_manifests=len(kept),
        kept_blobs=len(kept_blobs),
        kept_bytes=sum(item.size for item in [*kept, *kept_blobs]),
    )
    # Manifests first: no reader may find a manifest whose blobs are already gone.
    doomed.sort(key=lambda pair: (pair[1] in ("layer", "big file", "other blob"), pair[0].key))
    for item, kind in doomed:
        if not dry_run:
            await store.delete(item.key)
        report.removed.append(
            GcItem(
                key=item.key,
                kind=kind,
                bytes=item.size,
                age_days=round((now - item.modified) / 86400, 2),
            )
        )
        report.bytes_freed += item.size
    return report


def parse_age(text: str) -> float:
    """``30d``, ``12h``, ``90m``, ``45s`` or plain seconds -> seconds."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
    cleaned = text.strip().lower()
    unit = cleaned[-1:] if cleaned[-1:] in units else "s"
    number = cleaned[:-1] if cleaned[-1:] in units else cleaned
    try:
        value = float(number) * units[unit]
    except ValueError:
        raise ValueError(f"{text!r} is not an age like 30d, 12h or 90m") from None
    if value < 0:
        raise ValueError(f"{text!r} is negative")
    return value
