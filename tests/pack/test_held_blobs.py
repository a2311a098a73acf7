"""A send's blobs, held once packed, survive the layer cache's eviction until its upload is
done: with several sends of a project in flight, a later pack used to evict an earlier send's
blob before its upload read it. Through the real packer, cache and file store."""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from pathlib import Path

import pytest

from j2c_server.core.errors import ConfigError
from j2c_server.pack import PackSpec, make_manifest, pack, publish
from j2c_server.pack.held import HELD, STALE_S, hold, release
from j2c_server.storage import open_store
from j2c_server.storage.settings import StorageSettings


def edit(project: Path, number: int) -> None:
    (project / "train.py").write_text(f"print('edit {number}')\n")
    os.utime(project / "train.py", (1_700_000_000 + number, 1_700_000_000 + number))


def sha256(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_held_send_is_published_after_later_sends_evicted_its_blobs(
    spec: PackSpec, project: Path, cache: Path, tmp_path: Path
) -> None:
    spec = spec.model_copy(update={"layer_cache_max_bytes": 1})  # every old blob is over it
    edit(project, 0)
    first = hold(pack(spec, cache), cache, "job-1")
    for number in range(1, 7):  # six more sends, packed while the first is still uploading
        edit(project, number)
        pack(spec, cache)
    first_code = next(p for p in first.layers if p.layer.role.value == "code")
    assert not (cache / "blobs" / first_code.path.name).exists()  # evicted from the cache
    assert first_code.path.parent == cache / HELD / "job-1"

    store = open_store((tmp_path / "store").as_uri(), StorageSettings())
    published = asyncio.run(publish(store, first, make_manifest(first)))
    stored = tmp_path / "store" / "blobs" / "sha256" / f"{first_code.path.name}"
    assert sha256(stored) == first_code.layer.digest
    assert published.manifest_uri

    release(cache, "job-1")
    assert not (cache / HELD / "job-1").exists()
    assert sha256(stored) == first_code.layer.digest  # the store's copy is its own


def test_a_blob_gone_before_it_is_held_says_the_cap_is_below_one_send(
    spec: PackSpec, project: Path, cache: Path
) -> None:
    result = pack(spec, cache)
    result.layers[0].path.unlink()
    with pytest.raises(ConfigError, match="smaller than one send") as raised:
        hold(result, cache, "job-2")
    assert raised.value.field == "pack.layer_cache_max_mb"


def test_a_folder_a_dead_server_left_goes_once_stale(
    spec: PackSpec, project: Path, cache: Path
) -> None:
    hold(pack(spec, cache), cache, "died-mid-upload")
    left = cache / HELD / "died-mid-upload"
    old = time.time() - STALE_S - 60
    os.utime(left, (old, old))
    hold(pack(spec, cache), cache, "job-3")
    assert not left.exists()
    assert (cache / HELD / "job-3").is_dir()
