"""The manifest, and publishing layers + manifest to a real ``file://`` object store."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from j2c_server.pack import PackSpec, make_manifest, pack, publish
from j2c_server.storage import blob_key, open_store
from j2c_server.wire.manifest import LayerRole, Manifest
from tests.support.projects import write


def test_manifest_describes_layers_entry_and_venv(spec: PackSpec, cache: Path) -> None:
    result = pack(spec, cache)
    manifest = make_manifest(
        result, args=["--epochs", "3"], env={"SEED": "1"}, source_image="lab:1", created_at=1.0
    )
    assert [layer.role for layer in manifest.layers] == [LayerRole.code, LayerRole.venv]
    assert [layer.digest for layer in manifest.layers] == [p.layer.digest for p in result.layers]
    assert (manifest.entry.kind, manifest.entry.target) == ("script", "train.py")
    assert manifest.args == ["--epochs", "3"] and manifest.env == {"SEED": "1"}
    assert manifest.source_image == "lab:1"
    assert manifest.venv is not None and manifest.venv.include_system_site_packages
    code = manifest.layer(LayerRole.code)
    assert code is not None and code.source_path == str(spec.code_path)
    assert manifest.workdir == "."


def test_a_notebook_runs_in_its_own_folder_as_in_jupyterlab(
    spec: PackSpec, cache: Path, project: Path
) -> None:
    write(project / "notebooks" / "explore.ipynb", '{"cells": [], "nbformat": 4}')
    result = pack(spec.model_copy(update={"call_path": "notebooks/explore.ipynb"}), cache)
    manifest = make_manifest(result, created_at=1.0)
    assert (manifest.entry.kind, manifest.workdir) == ("notebook", "notebooks")


def test_manifest_digest_is_reproducible(spec: PackSpec, cache: Path) -> None:
    result = pack(spec, cache)
    first = make_manifest(result, created_at=1.0)
    again = make_manifest(pack(spec, cache), created_at=1.0)
    assert first.digest() == again.digest()


async def test_publish_uploads_blobs_then_the_manifest(
    spec: PackSpec, cache: Path, tmp_path: Path
) -> None:
    result = pack(spec, cache)
    manifest = make_manifest(result)
    store = open_store((tmp_path / "store").as_uri())
    moved: list[int] = []
    published = await publish(store, result, manifest, moved.append)
    assert published.uploaded == [LayerRole.code, LayerRole.venv]
    layers = sum(p.layer.size for p in result.layers)
    assert published.manifest_uploaded  # a new manifest counts in the bytes sent
    assert published.bytes_uploaded == layers + published.manifest_size and layers == sum(moved)
    assert published.manifest_uri == store.uri(published.manifest_key)
    stored = Manifest.model_validate_json(await store.get_bytes(published.manifest_key))
    assert stored.digest() == manifest.digest() == published.manifest_digest
    for packed in result.layers:
        blob = await store.get_bytes(blob_key(packed.layer.digest))
        assert "sha256:" + hashlib.sha256(blob).hexdigest() == packed.layer.digest


async def test_publishing_again_sends_nothing(spec: PackSpec, cache: Path, tmp_path: Path) -> None:
    result = pack(spec, cache)
    manifest = make_manifest(result)
    store = open_store((tmp_path / "store").as_uri())
    await publish(store, result, manifest)
    again = await publish(store, result, manifest)
    assert again.bytes_uploaded == 0 and not again.manifest_uploaded
    assert again.already_present == [LayerRole.code, LayerRole.venv]


async def test_resubmit_after_a_code_change_uploads_only_the_code_layer(
    spec: PackSpec, project: Path, cache: Path, tmp_path: Path
) -> None:
    store = open_store((tmp_path / "store").as_uri())
    first = pack(spec, cache)
    await publish(store, first, make_manifest(first))
    write(project / "train.py", "print('changed')\n")
    second = pack(spec, cache)
    published = await publish(store, second, make_manifest(second))
    assert published.uploaded == [LayerRole.code]
    assert published.already_present == [LayerRole.venv]
    code = second.layer(LayerRole.code)
    assert code is not None
    assert published.bytes_uploaded == code.layer.size + published.manifest_size


async def test_repacking_replaces_cache_blobs_so_a_linked_published_blob_stays_intact(
    spec: PackSpec, cache: Path, tmp_path: Path
) -> None:
    # The file:// store hard-links cache blobs; that is only safe while the packer never
    # rewrites a cache blob in place.
    store = open_store((tmp_path / "store").as_uri())
    first = pack(spec, cache)
    await publish(store, first, make_manifest(first))
    code = first.layer(LayerRole.code)
    assert code is not None
    published = tmp_path / "store" / blob_key(code.layer.digest)
    linked = published.stat().st_ino
    assert linked == code.path.stat().st_ino
    shutil.rmtree(cache / "layers")  # forget the fingerprints: the same blobs are written again
    again = pack(spec, cache)
    repacked = again.layer(LayerRole.code)
    assert repacked is not None and repacked.layer.digest == code.layer.digest
    assert repacked.path.stat().st_ino != linked
    assert published.stat().st_ino == linked
    assert "sha256:" + hashlib.sha256(published.read_bytes()).hexdigest() == code.layer.digest
