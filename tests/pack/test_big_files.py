"""Big files travel once: code files of ``big_file_bytes`` and up are their own blobs, listed in
the manifest, so an edit elsewhere uploads the small files' layer only. Real packer, real
``file://`` store."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from j2c_server.config import PackSettings
from j2c_server.pack import PackSpec, make_manifest, pack, preflight, publish
from j2c_server.storage import open_store
from j2c_server.storage.base import file_blob_key
from j2c_server.wire.manifest import MANIFEST_FORMAT_VERSION_FILES, LayerRole, Manifest
from tests.pack.archives import names
from tests.support.projects import OLD_MTIME, backdate

MIB = 1024 * 1024


def write_big(path: Path, size: int, seed: bytes = b"a") -> bytes:
    data = (hashlib.sha256(seed).digest() * (size // 32 + 1))[:size]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return data


@pytest.fixture
def big_project(project: Path) -> Path:
    write_big(project / "data" / "train.bin", 2 * MIB)
    (project / "data" / "train.bin").chmod(0o640)
    backdate(project)  # not racy: the cache records every file's stat
    return project


@pytest.fixture
def big_spec(spec: PackSpec, big_project: Path) -> PackSpec:
    return spec.model_copy(update={"code_path": big_project, "big_file_bytes": MIB})


def test_the_setting_reaches_the_spec() -> None:
    settings = PackSettings(big_file_mb=0.5, layer_cache_keep_sends=3)
    spec = PackSpec.from_settings(settings, code_path=".", call_path="x")
    assert spec.big_file_bytes == MIB // 2 and spec.layer_cache_keep_sends == 3
    assert PackSpec(code_path=".", call_path="x").big_file_bytes == MIB


def test_a_big_file_is_its_own_blob_not_in_the_code_layer(big_spec: PackSpec, cache: Path) -> None:
    result = pack(big_spec, cache)
    code = result.layer(LayerRole.code)
    assert code is not None
    assert "data/train.bin" not in names(code.path)
    assert "data" in names(code.path)  # its folder still comes with the layer
    [packed] = result.files
    data = (big_spec.code_path / "data" / "train.bin").read_bytes()
    assert packed.file.path == "data/train.bin" and packed.file.size == len(data)
    assert packed.file.digest == "sha256:" + hashlib.sha256(data).hexdigest()
    assert packed.file.mode == 0o640
    assert packed.path.read_bytes() == data and not packed.reused
    assert code.layer.unpacked_size < MIB  # the layer's bytes are the small files'
    manifest = make_manifest(result, created_at=1.0)
    assert manifest.format_version == MANIFEST_FORMAT_VERSION_FILES == 2
    assert manifest.files == [packed.file]
    assert Manifest.model_validate_json(manifest.canonical_json()) == manifest


def test_without_big_files_the_manifest_stays_readable_by_older_readers(
    spec: PackSpec, cache: Path
) -> None:
    manifest = make_manifest(pack(spec, cache), created_at=1.0)
    assert manifest.format_version == 1 and manifest.files is None
    assert "files" not in json.loads(manifest.canonical_json())  # the same digest as before


def test_the_threshold_zero_keeps_everything_in_the_layer(big_spec: PackSpec, cache: Path) -> None:
    result = pack(big_spec.model_copy(update={"big_file_bytes": 0}), cache)
    code = result.layer(LayerRole.code)
    assert code is not None and "data/train.bin" in names(code.path) and result.files == []


def test_an_unchanged_big_file_is_recognised_by_its_stat(big_spec: PackSpec, cache: Path) -> None:
    first = pack(big_spec, cache)
    again = pack(big_spec, cache)
    assert [f.reused for f in again.files] == [True]
    assert again.files[0].file == first.files[0].file


async def test_an_edit_of_only_the_big_file_uploads_only_that_blob(
    big_spec: PackSpec, big_project: Path, cache: Path, tmp_path: Path
) -> None:
    store = open_store((tmp_path / "store").as_uri())
    first = pack(big_spec, cache)
    await publish(store, first, make_manifest(first))
    data = write_big(big_project / "data" / "train.bin", 2 * MIB, seed=b"b")
    os.utime(big_project / "data" / "train.bin", (OLD_MTIME + 5, OLD_MTIME + 5))
    second = pack(big_spec, cache)
    assert all(layer.reused for layer in second.layers)
    published = await publish(store, second, make_manifest(second))
    assert published.uploaded == [] and published.files_uploaded == ["data/train.bin"]
    assert published.bytes_uploaded == len(data) + published.manifest_size
    digest = second.files[0].file.digest
    assert await store.get_bytes(file_blob_key(digest)) == data


async def test_an_edit_of_a_small_file_uploads_no_big_blob(
    big_spec: PackSpec, big_project: Path, cache: Path, tmp_path: Path
) -> None:
    store = open_store((tmp_path / "store").as_uri())
    first = pack(big_spec, cache)
    await publish(store, first, make_manifest(first))
    with open(big_project / "train.py", "a") as script:
        script.write("# one more line\n")
    os.utime(big_project / "train.py", (OLD_MTIME + 5, OLD_MTIME + 5))
    second = pack(big_spec, cache)
    assert [f.reused for f in second.files] == [True]
    published = await publish(store, second, make_manifest(second))
    assert published.uploaded == [LayerRole.code] and published.files_uploaded == []
    assert published.files_present == 1
    assert published.bytes_uploaded <= 64 * 1024


def test_the_plan_lists_big_files_and_suggests_storage_for_data(
    big_spec: PackSpec, big_project: Path
) -> None:
    with open(big_project / "data" / "huge.bin", "wb") as handle:
        handle.truncate(80 * MIB)  # sparse: the plan only stats it
    plan = preflight(big_spec)
    assert [(p.path, p.bytes) for p in plan.big_files] == [
        ("data/huge.bin", 80 * MIB),
        ("data/train.bin", 2 * MIB),
    ]
    [warning] = [w for w in plan.warnings if w.code == "big_files"]
    assert warning.path == "data/huge.bin" and "data/train.bin" not in warning.message
    assert "storage" in warning.message and ".j2cignore" in warning.message


def test_small_big_files_get_no_storage_hint(big_spec: PackSpec) -> None:
    plan = preflight(big_spec)
    assert [p.path for p in plan.big_files] == ["data/train.bin"]
    assert not [w for w in plan.warnings if w.code == "big_files"]
