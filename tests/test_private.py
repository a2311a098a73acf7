"""j2c's own folders and files are the user's alone, whatever the umask: the helper, the registry
(and its WAL files), the layer cache, the ``file://`` store and detached watchers' logs."""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from j2c_server.config import J2CSettings
from j2c_server.core.file_modes import private_dir, private_file, private_opener
from j2c_server.jobs.service import JobService
from j2c_server.pack.fingerprint import CachedLayer, LayerCache
from j2c_server.registry.job_registry import open_registry
from j2c_server.storage.file import FileStore


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@pytest.fixture(params=[0o022, 0o000], ids=["umask-022", "umask-000"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def test_private_dir_makes_every_missing_folder_0700(tmp_path: Path, umask: int) -> None:
    deep = private_dir(tmp_path / "a" / "b" / "c")
    assert [mode(p) for p in (deep, deep.parent, deep.parent.parent)] == [0o700] * 3


def test_private_dir_tightens_a_wide_folder_and_keeps_what_is_inside(tmp_path: Path) -> None:
    old = tmp_path / "old"
    old.mkdir(mode=0o777)
    old.chmod(0o777)
    (old / "kept").write_text("x")
    private_dir(old)
    assert mode(old) == 0o700
    assert (old / "kept").read_text() == "x"


def test_private_files_are_0600(tmp_path: Path, umask: int) -> None:
    created = private_file(tmp_path / "f")
    with open(tmp_path / "g", "ab", opener=private_opener) as handle:
        handle.write(b"x")
    wide = tmp_path / "wide"
    wide.write_text("y")
    wide.chmod(0o666)
    private_file(wide)
    assert [mode(created), mode(tmp_path / "g"), mode(wide)] == [0o600] * 3
    assert wide.read_text() == "y"


async def test_the_registry_and_its_wal_files_are_private(tmp_path: Path, umask: int) -> None:
    data = tmp_path / "data"
    registry = open_registry(data)
    try:
        await registry.jobs.all()
    finally:
        registry.close()
    files = sorted(p.name for p in data.iterdir())
    assert "registry.sqlite3" in files
    assert mode(data) == 0o700
    assert {name: mode(data / name) for name in files} == {name: 0o600 for name in files}


async def test_a_registry_made_by_an_older_j2c_is_tightened_on_open(tmp_path: Path) -> None:
    data = tmp_path / "data"
    registry = open_registry(data)
    registry.close()
    data.chmod(0o755)
    for path in data.iterdir():
        path.chmod(0o644)
    registry = open_registry(data)
    registry.close()
    assert mode(data) == 0o700
    assert {mode(p) for p in data.iterdir()} == {0o600}


def test_the_layer_cache_is_private(tmp_path: Path, umask: int) -> None:
    cache = LayerCache(tmp_path / "layers")
    with cache.new_blob() as (temp, handle):
        handle.write(b"blob")
        handle.flush()
        blob = cache.commit(temp, "sha256:" + "0" * 64)
    cache.record("key", CachedLayer(digest="sha256:" + "0" * 64, size=4, files=1, unpacked_size=4))
    folders = [cache.root, cache.blobs, cache.index]
    files = [blob, cache.root / "CACHEDIR.TAG", cache.index / "key.json"]
    assert [mode(p) for p in folders] == [0o700] * 3
    assert [mode(p) for p in files] == [0o600] * 3


async def test_the_file_store_is_private_and_a_linked_blob_stays_0600(
    tmp_path: Path, umask: int
) -> None:
    store = FileStore(tmp_path / "store")
    blob = tmp_path / "blob.tar.zst"
    blob.write_bytes(b"layer")
    blob.chmod(0o644)  # a cache blob an older j2c opened up
    key = "blobs/sha256/" + "a" * 64 + ".tar.zst"
    await store.put_file(key, blob)
    await store.put_bytes("manifests/sha256/" + "b" * 64 + ".json", b"{}")
    await store.put_file("jobs/j1/outputs/result.txt", blob)
    linked = store.root / key
    assert linked.stat().st_ino == blob.stat().st_ino
    folders = [p for p in store.root.rglob("*") if p.is_dir()] + [store.root]
    files = [p for p in store.root.rglob("*") if p.is_file()]
    assert len(files) == 3
    assert {mode(p) for p in folders} == {0o700}
    assert {mode(p) for p in files} == {0o600}


async def test_a_store_root_made_by_an_older_j2c_is_tightened(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    root.chmod(0o755)
    await FileStore(root).put_bytes("jobs/x", b"1")
    assert mode(root) == 0o700


async def test_a_detached_watchers_log_is_private(tmp_path: Path, umask: int) -> None:
    settings = J2CSettings(data_dir=str(tmp_path / "data"))
    service = JobService(settings)
    try:
        pid = service.run_detached_watcher("no-such-job")
        await asyncio.to_thread(os.waitpid, pid, 0)
    finally:
        await service.stop()
    logs = tmp_path / "data" / "watchers"
    assert mode(logs) == 0o700
    assert mode(logs / "no-such-job.log") == 0o600
