"""The embedded file:// store: atomic writes, concurrent writers, listing, integrity."""

from __future__ import annotations

import asyncio
import hashlib
import os
import tempfile
import threading
from pathlib import Path

import pytest

from j2c_server.core.errors import IntegrityError, InvalidInput
from j2c_server.storage import FileStore, ObjectNotFound, blob_key, open_store


def make_store(tmp_path: Path) -> FileStore:
    store = open_store((tmp_path / "store").as_uri())
    assert isinstance(store, FileStore)
    return store


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.rglob("*") if p.name.endswith(".j2c-part")]


async def test_put_file_then_get_file_round_trips_and_reports_progress(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    data = os.urandom(9 * 1024 * 1024 + 7)
    moved_up: list[int] = []
    moved_down: list[int] = []
    await store.put_file(
        "jobs/j1/out.bin", write(tmp_path / "in.bin", data), progress=moved_up.append
    )
    await store.get_file(
        "jobs/j1/out.bin",
        tmp_path / "dest" / "out.bin",
        sha256=hashlib.sha256(data).hexdigest(),
        progress=moved_down.append,
    )
    assert (tmp_path / "dest" / "out.bin").read_bytes() == data
    assert sum(moved_up) == sum(moved_down) == len(data)
    assert await store.size("jobs/j1/out.bin") == len(data)


async def test_put_bytes_then_get_bytes_round_trips(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    await store.put_bytes("manifests/sha256/abc.json", b'{"a": 1}')
    assert await store.get_bytes("manifests/sha256/abc.json") == b'{"a": 1}'


async def test_existing_content_addressed_blob_is_not_written_again(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    data = b"layer bytes" * 1000
    key = blob_key("sha256:" + hashlib.sha256(data).hexdigest())
    source = write(tmp_path / "layer.tar.zst", data)
    await store.put_file(key, source)
    stored = store.root / key
    before = stored.stat()
    moved: list[int] = []
    await store.put_file(key, source, progress=moved.append)
    assert moved == []
    assert (stored.stat().st_ino, stored.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


async def test_put_file_says_whether_it_wrote(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    source = write(tmp_path / "layer.tar.zst", b"layer bytes")
    key = blob_key("sha256:" + hashlib.sha256(b"layer bytes").hexdigest())
    assert await store.put_file(key, source) is True
    assert await store.put_file(key, source) is False
    assert await store.put_file("jobs/j1/out", source) is True
    assert await store.put_file("jobs/j1/out", source) is True


async def test_a_blob_on_the_same_filesystem_is_linked_not_copied(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    data = os.urandom(3 * 1024 * 1024)
    source = write(tmp_path / "layer.tar.zst", data)
    source.chmod(0o600)  # as the layer cache writes its blobs
    key = blob_key("sha256:" + hashlib.sha256(data).hexdigest())
    moved: list[int] = []
    await store.put_file(key, source, progress=moved.append)
    stored = (store.root / key).stat()
    assert stored.st_ino == source.stat().st_ino
    assert stored.st_mode & 0o777 == 0o600  # private, as the cache blob it shares an inode with
    assert moved == [len(data)]
    assert await store.get_bytes(key) == data
    assert leftovers(store.root) == []


async def test_a_shared_store_is_readable_by_other_uids_and_keeps_the_cache_private(
    tmp_path: Path,
) -> None:
    store = FileStore(tmp_path / "shared-store", shared=True)
    data = os.urandom(64 * 1024)
    source = write(tmp_path / "layer.tar.zst", data)
    source.chmod(0o600)  # the layer cache's blob
    key = blob_key("sha256:" + hashlib.sha256(data).hexdigest())
    await store.put_file(key, source)
    await store.put_bytes("manifests/sha256/m.json", b"{}")
    stored = (store.root / key).stat()
    assert stored.st_ino != source.stat().st_ino  # copied: one inode would share one mode
    assert source.stat().st_mode & 0o777 == 0o600
    assert stored.st_mode & 0o777 == 0o644
    assert (store.root / "manifests/sha256/m.json").stat().st_mode & 0o777 == 0o644
    for folder in (store.root / key).parents:
        if folder == store.root:
            break
        assert folder.stat().st_mode & 0o777 == 0o755


async def test_concurrent_links_of_one_blob_leave_one_object_and_no_temp_file(
    tmp_path: Path,
) -> None:
    store = make_store(tmp_path)
    source = write(tmp_path / "layer.tar.zst", b"layer bytes" * 1000)
    key = blob_key("sha256:" + hashlib.sha256(source.read_bytes()).hexdigest())
    await asyncio.gather(*(store.put_file(key, source) for _ in range(8)))
    assert (store.root / key).stat().st_ino == source.stat().st_ino
    assert leftovers(store.root) == []


async def test_job_files_are_copied_so_a_later_rewrite_of_the_source_does_not_reach_the_store(
    tmp_path: Path,
) -> None:
    store = make_store(tmp_path)
    source = write(tmp_path / "result.csv", b"epoch,loss\n1,0.5\n")
    await store.put_file("jobs/j1/result.csv", source)
    with source.open("r+b") as rewrite:  # in place, as a job's next run would
        rewrite.write(b"EPOCH")
    assert (store.root / "jobs/j1/result.csv").stat().st_ino != source.stat().st_ino
    assert await store.get_bytes("jobs/j1/result.csv") == b"epoch,loss\n1,0.5\n"


async def test_a_blob_on_another_filesystem_is_copied(tmp_path: Path) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == tmp_path.stat().st_dev:
        pytest.skip("needs a second filesystem (/dev/shm) to link across")
    store = make_store(tmp_path)
    data = b"layer bytes" * 1000
    key = blob_key("sha256:" + hashlib.sha256(data).hexdigest())
    with tempfile.TemporaryDirectory(dir=shm) as other:
        source = write(Path(other) / "layer.tar.zst", data)
        await store.put_file(key, source)
        assert (store.root / key).stat().st_ino != source.stat().st_ino
    assert await store.get_bytes(key) == data
    assert leftovers(store.root) == []


async def test_other_keys_are_overwritten(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    await store.put_bytes("jobs/j1/status", b"old")
    await store.put_file("jobs/j1/status", write(tmp_path / "new", b"new!"))
    assert await store.get_bytes("jobs/j1/status") == b"new!"


async def test_write_leaves_no_temp_file_and_a_reader_sees_old_or_new_never_partial(
    tmp_path: Path,
) -> None:
    store = make_store(tmp_path)
    old, new = b"o" * (8 * 1024 * 1024), b"n" * (16 * 1024 * 1024)
    await store.put_bytes("jobs/j1/big", old)
    target = store.root / "jobs" / "j1" / "big"
    seen: set[bytes] = set()
    stop = threading.Event()

    def read_constantly() -> None:
        while not stop.is_set():
            content = target.read_bytes()
            seen.add(content[:1] + str(len(content)).encode())

    reader = threading.Thread(target=read_constantly)
    reader.start()
    try:
        await store.put_file("jobs/j1/big", write(tmp_path / "new", new))
    finally:
        stop.set()
        reader.join()
    assert seen <= {b"o" + str(len(old)).encode(), b"n" + str(len(new)).encode()}
    assert target.read_bytes() == new
    assert leftovers(store.root) == []


async def test_concurrent_writers_of_one_key_leave_one_complete_version(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    versions = [bytes([65 + i]) * (3 * 1024 * 1024 + i) for i in range(8)]
    sources = [write(tmp_path / f"v{i}", data) for i, data in enumerate(versions)]
    await asyncio.gather(*(store.put_file("jobs/j1/result", src) for src in sources))
    assert await store.get_bytes("jobs/j1/result") in versions
    assert leftovers(store.root) == []


async def test_list_returns_sorted_keys_under_a_prefix_without_temp_files(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    for key in ("blobs/sha256/b.tar.zst", "blobs/sha256/a.tar.zst", "jobs/j1/log", "top"):
        await store.put_bytes(key, b"x")
    (store.root / "blobs" / "sha256" / ".c.tar.zst.1234.j2c-part").write_bytes(b"partial")
    assert await store.list("blobs/") == ["blobs/sha256/a.tar.zst", "blobs/sha256/b.tar.zst"]
    assert await store.list("jobs/j1/l") == ["jobs/j1/log"]
    assert await store.list() == [
        "blobs/sha256/a.tar.zst",
        "blobs/sha256/b.tar.zst",
        "jobs/j1/log",
        "top",
    ]


async def test_list_of_an_empty_or_missing_store_is_empty(tmp_path: Path) -> None:
    assert await make_store(tmp_path).list("blobs/") == []


async def test_delete_removes_the_key_and_ignores_missing_ones(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    await store.put_bytes("jobs/j1/a", b"x")
    await store.delete("jobs/j1/a")
    await store.delete("jobs/j1/never-existed")
    assert not await store.exists("jobs/j1/a")
    assert await store.size("jobs/j1/a") is None


async def test_get_file_with_wrong_digest_raises_and_leaves_no_partial_file(
    tmp_path: Path,
) -> None:
    store = make_store(tmp_path)
    await store.put_bytes("blobs/sha256/x.tar.zst", b"tampered content")
    dest = tmp_path / "dest" / "x.tar.zst"
    with pytest.raises(IntegrityError, match="does not match its digest") as caught:
        await store.get_file("blobs/sha256/x.tar.zst", dest, sha256="0" * 64)
    assert caught.value.code == "integrity"
    assert not dest.exists()
    assert leftovers(tmp_path / "dest") == []


async def test_get_file_with_wrong_digest_keeps_the_previous_destination(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    await store.put_bytes("jobs/j1/x", b"new but corrupt")
    dest = write(tmp_path / "x", b"previous good copy")
    with pytest.raises(IntegrityError):
        await store.get_file("jobs/j1/x", dest, sha256="sha256:" + "1" * 64)
    assert dest.read_bytes() == b"previous good copy"


async def test_malformed_digest_is_invalid_input_naming_sha256(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    await store.put_bytes("jobs/j1/x", b"x")
    with pytest.raises(InvalidInput) as caught:
        await store.get_file("jobs/j1/x", tmp_path / "x", sha256="not-a-digest")
    assert caught.value.field == "sha256"


async def test_missing_key_raises_object_not_found(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    with pytest.raises(ObjectNotFound):
        await store.get_file("jobs/none", tmp_path / "dest")
    with pytest.raises(ObjectNotFound):
        await store.get_bytes("jobs/none")
    assert not (tmp_path / "dest").exists()


@pytest.mark.parametrize("key", ["../escape", "a/../../b", "/abs", "a//b", "", "a\\b", "./a"])
async def test_keys_that_could_escape_the_root_are_refused(tmp_path: Path, key: str) -> None:
    store = make_store(tmp_path)
    with pytest.raises(InvalidInput) as caught:
        await store.put_bytes(key, b"x")
    assert caught.value.field == "key"
    assert not (tmp_path / "escape").exists()


async def test_presign_returns_none(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    await store.put_bytes("jobs/j1/x", b"x")
    assert await store.presign("jobs/j1/x") is None
