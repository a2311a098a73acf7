"""Store garbage collection (``storage/gc.py``) on a real ``file://`` store and on S3 (moto):
what a job record or a recent manifest references stays, the rest goes, manifests first."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

from j2c_server.core.errors import StorageError
from j2c_server.storage import ObjectStore, open_store
from j2c_server.storage.base import blob_key, file_blob_key, manifest_key
from j2c_server.storage.gc import collect_garbage, parse_age, referenced_manifest
from j2c_server.wire.manifest import EntryPoint, FileBlob, Layer, LayerRole, Manifest
from tests.support.s3 import S3Target

DAY = 86400.0


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass
class Sent:
    manifest: str  # its key
    uri: str
    blobs: list[str]


async def send(store: ObjectStore, name: str, *, shared: bytes = b"venv") -> Sent:
    """A manifest naming a code layer of its own, a shared venv layer and a big file."""
    code, big = f"code {name}".encode(), f"big {name}".encode()
    layers = [
        Layer(role=LayerRole.code, digest=digest(code), size=len(code), source_path="/p"),
        Layer(role=LayerRole.venv, digest=digest(shared), size=len(shared), source_path="/v"),
    ]
    files = [FileBlob(path="data.bin", digest=digest(big), size=len(big))]
    keys = []
    for layer, data in zip(layers, (code, shared), strict=True):
        keys.append(blob_key(layer.digest))
        await store.put_bytes(keys[-1], data)
    keys.append(file_blob_key(files[0].digest))
    await store.put_bytes(keys[-1], big)
    manifest = Manifest(
        format_version=2,
        created_by="test",
        created_at=time.time(),
        layers=layers,
        entry=EntryPoint(kind="script", target="train.py"),
        files=files,
    )
    key = manifest_key(manifest.digest())
    await store.put_bytes(key, manifest.canonical_json())
    return Sent(key, store.uri(key), keys)


@pytest_asyncio.fixture(params=["file", "s3"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ObjectStore]:
    if request.param == "file":
        opened = open_store((tmp_path / "store").as_uri())
    else:
        target: S3Target = request.getfixturevalue("s3_bucket")
        opened = open_store(target.url, target.settings)
    yield opened
    await opened.close()


async def keys(store: ObjectStore) -> set[str]:
    return set(await store.list(""))


async def test_what_a_job_record_names_stays_and_the_rest_goes(store: ObjectStore) -> None:
    running = await send(store, "running")
    removed = await send(store, "removed job")
    orphan = blob_key(digest(b"orphan"))
    await store.put_bytes(orphan, b"orphan")
    await store.put_bytes("jobs/job-r/outputs/model.pt", b"weights")
    later = time.time() + 40 * DAY  # everything is 40 days old by then
    jobs = [("job-r", running.uri), ("job-q", None)]

    dry = await collect_garbage(store, jobs, older_than_s=30 * DAY, dry_run=True, now=later)
    before = await keys(store)
    assert {item.key for item in dry.removed} == {
        removed.manifest,
        removed.blobs[0],
        removed.blobs[2],
        orphan,
    }
    assert dry.bytes_freed == sum(item.bytes for item in dry.removed) > 0
    assert await keys(store) == before  # a dry run removes nothing

    report = await collect_garbage(store, jobs, older_than_s=30 * DAY, dry_run=False, now=later)
    assert [item.key for item in report.removed] == [item.key for item in dry.removed]
    assert report.removed[0].kind == "manifest"  # manifests before their blobs
    left = await keys(store)
    assert left == before - {item.key for item in dry.removed}
    assert {running.manifest, *running.blobs} <= left  # the shared venv layer too
    assert "jobs/job-r/outputs/model.pt" in left  # outputs are never touched
    assert report.kept_manifests == 1 and report.kept_blobs == 3


async def test_nothing_recent_goes_even_unreferenced(store: ObjectStore) -> None:
    await send(store, "uploading now")
    await store.put_bytes(blob_key(digest(b"half a send")), b"half a send")
    before = await keys(store)
    report = await collect_garbage(store, [], older_than_s=30 * DAY, dry_run=False)
    assert report.removed == [] and await keys(store) == before


async def test_an_old_manifest_a_recent_one_names_keeps_its_blobs(tmp_path: Path) -> None:
    store = open_store((tmp_path / "store").as_uri())
    old = await send(store, "old")
    new = await send(store, "new")
    for key in [old.manifest, *old.blobs, *new.blobs]:
        path = tmp_path / "store" / key
        os.utime(path, (time.time() - 60 * DAY,) * 2)
    report = await collect_garbage(store, [], older_than_s=30 * DAY, dry_run=False)
    # new's manifest is recent: kept, and so are its (old) blobs, the shared venv included.
    assert {item.key for item in report.removed} == {old.manifest, old.blobs[0], old.blobs[2]}
    assert {new.manifest, *new.blobs} <= await keys(store)


async def test_a_resolved_job_manifest_counts_while_its_job_is_known(tmp_path: Path) -> None:
    store = open_store((tmp_path / "store").as_uri())
    sent = await send(store, "job")
    await store.put_bytes("jobs/job-1/manifest.json", await store.get_bytes(sent.manifest))
    later = time.time() + 40 * DAY
    kept = await collect_garbage(
        store, [("job-1", None)], older_than_s=DAY, dry_run=True, now=later
    )
    assert {item.key for item in kept.removed} == {sent.manifest}
    gone = await collect_garbage(store, [], older_than_s=DAY, dry_run=True, now=later)
    assert "jobs/job-1/manifest.json" in {item.key for item in gone.removed}
    assert set(sent.blobs) <= {item.key for item in gone.removed}


async def test_an_unreadable_kept_manifest_stops_before_removing_anything(tmp_path: Path) -> None:
    store = open_store((tmp_path / "store").as_uri())
    await send(store, "old")
    broken = manifest_key(digest(b"broken"))
    await store.put_bytes(broken, b"not json")
    before = await keys(store)
    with pytest.raises(StorageError, match="is not JSON"):
        await collect_garbage(
            store,
            [("job-1", store.uri(broken))],
            older_than_s=DAY,
            dry_run=False,
            now=time.time() + 40 * DAY,
        )
    assert await keys(store) == before


def test_ages_and_manifest_references_parse() -> None:
    assert parse_age("30d") == 30 * DAY and parse_age("12h") == 43200 and parse_age("90") == 90
    with pytest.raises(ValueError, match="not an age"):
        parse_age("soon")
    hexdigest = "a" * 64
    uri = f"https://host/b/prefix/manifests/sha256/{hexdigest}.json?X-Amz-Signature=1"
    assert referenced_manifest(uri) == f"manifests/sha256/{hexdigest}.json"
    assert referenced_manifest(None) is None


async def test_a_send_of_old_content_dates_its_manifest_so_gc_keeps_it(tmp_path: Path) -> None:
    from j2c_server.pack import PackSpec, make_manifest, pack, publish
    from tests.support.projects import make_project

    project = make_project(tmp_path / "project", secrets=False)
    spec = PackSpec(code_path=project, call_path="train.py")
    store = open_store((tmp_path / "store").as_uri())
    result = pack(spec, tmp_path / "cache")
    manifest = make_manifest(result, created_at=1.0)
    await publish(store, result, manifest)
    for path in (tmp_path / "store").rglob("*"):
        os.utime(path, (time.time() - 60 * DAY,) * 2)  # sent two months ago
    # Sent again today by a job this registry does not know (another lab): same manifest.
    again = await publish(store, result, manifest)
    assert not again.manifest_uploaded and again.bytes_uploaded == 0
    report = await collect_garbage(store, [], older_than_s=30 * DAY, dry_run=False)
    assert report.removed == [] and report.kept_manifests == 1 and report.kept_blobs == 1
