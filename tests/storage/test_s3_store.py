"""The s3:// store against a real moto server over HTTP (aiobotocore, no in-process mocks)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import httpx
import pytest

from j2c_server.core.errors import IntegrityError
from j2c_server.storage import ObjectNotFound, blob_key, open_store
from j2c_server.storage.multipart import MIB
from j2c_server.storage.s3 import S3Store
from tests.storage.fault_proxy import FaultProxy
from tests.support.s3 import S3Target

THREE_PARTS = 12 * MIB + 12345  # with 5 MiB parts: 5 + 5 + 2 MiB


def s3_store(target: S3Target) -> S3Store:
    store = open_store(target.url, target.settings)
    assert isinstance(store, S3Store)
    return store


def random_file(path: Path, size: int) -> tuple[Path, str]:
    data = os.urandom(size)
    path.write_bytes(data)
    return path, hashlib.sha256(data).hexdigest()


async def test_multipart_upload_then_download_round_trips_and_verifies(
    s3_bucket: S3Target, tmp_path: Path
) -> None:
    store = s3_store(s3_bucket)
    source, digest = random_file(tmp_path / "layer", THREE_PARTS)
    key = blob_key("sha256:" + digest)
    sent: list[int] = []
    received: list[int] = []
    try:
        await store.put_file(key, source, progress=sent.append)
        await store.get_file(key, tmp_path / "out", sha256=digest, progress=received.append)
    finally:
        await store.close()
    assert (tmp_path / "out").read_bytes() == source.read_bytes()
    assert sorted(sent) == [2 * MIB + 12345, 5 * MIB, 5 * MIB]
    assert sum(received) == THREE_PARTS
    etag = s3_bucket.client().head_object(Bucket=s3_bucket.bucket, Key=s3_bucket.key(key))["ETag"]
    assert etag.endswith('-3"')  # S3 marks multipart objects with their part count


async def test_small_file_goes_up_in_one_put(s3_bucket: S3Target, tmp_path: Path) -> None:
    store = s3_store(s3_bucket)
    source, _ = random_file(tmp_path / "small", 1000)
    try:
        await store.put_file("jobs/j1/small", source)
        assert await store.get_bytes("jobs/j1/small") == source.read_bytes()
    finally:
        await store.close()
    etag = s3_bucket.client().head_object(
        Bucket=s3_bucket.bucket, Key=s3_bucket.key("jobs/j1/small")
    )
    assert "-" not in etag["ETag"]


async def test_empty_file_round_trips(s3_bucket: S3Target, tmp_path: Path) -> None:
    store = s3_store(s3_bucket)
    (tmp_path / "empty").write_bytes(b"")
    empty_sha256 = hashlib.sha256(b"").hexdigest()
    try:
        await store.put_file(blob_key("sha256:" + empty_sha256), tmp_path / "empty")
        await store.get_file(
            blob_key("sha256:" + empty_sha256), tmp_path / "out", sha256=empty_sha256
        )
    finally:
        await store.close()
    assert (tmp_path / "out").read_bytes() == b""


async def test_put_bytes_get_bytes_size_and_exists(s3_bucket: S3Target) -> None:
    store = s3_store(s3_bucket)
    try:
        await store.put_bytes("manifests/sha256/m.json", b'{"layers": []}')
        assert await store.get_bytes("manifests/sha256/m.json") == b'{"layers": []}'
        assert await store.size("manifests/sha256/m.json") == 14
        assert await store.exists("manifests/sha256/m.json")
        assert not await store.exists("manifests/sha256/other.json")
        assert await store.size("manifests/sha256/other.json") is None
    finally:
        await store.close()


async def test_existing_blob_is_checked_with_head_and_not_uploaded_again(
    s3_bucket: S3Target, fault_proxy: FaultProxy, tmp_path: Path
) -> None:
    store = s3_store(s3_bucket.via(fault_proxy.url))
    source, digest = random_file(tmp_path / "layer", THREE_PARTS)
    key = blob_key("sha256:" + digest)
    try:
        await store.put_file(key, source)
        fault_proxy.reset_counters()
        sent: list[int] = []
        await store.put_file(key, source, progress=sent.append)
    finally:
        await store.close()
    assert sent == []
    assert fault_proxy.bytes_up == 0
    assert fault_proxy.requests == 1  # the HEAD


async def test_same_key_outside_blobs_is_uploaded_again(
    s3_bucket: S3Target, tmp_path: Path
) -> None:
    store = s3_store(s3_bucket)
    try:
        await store.put_file("jobs/j1/out", random_file(tmp_path / "a", 100)[0])
        await store.put_file("jobs/j1/out", random_file(tmp_path / "b", 200)[0])
        assert await store.size("jobs/j1/out") == 200
    finally:
        await store.close()


async def test_upload_resumes_an_unfinished_multipart_upload_sending_only_missing_parts(
    s3_bucket: S3Target, tmp_path: Path
) -> None:
    source, digest = random_file(tmp_path / "layer", THREE_PARTS)
    key = blob_key("sha256:" + digest)
    client = s3_bucket.client()
    full = s3_bucket.key(key)
    # As j2c leaves an interrupted upload: CRC32 part checksums, part 1 stored.
    upload = client.create_multipart_upload(
        Bucket=s3_bucket.bucket, Key=full, ChecksumAlgorithm="CRC32"
    )["UploadId"]
    first = source.read_bytes()[: 5 * MIB]
    client.upload_part(
        Bucket=s3_bucket.bucket,
        Key=full,
        UploadId=upload,
        PartNumber=1,
        Body=first,
        ChecksumAlgorithm="CRC32",
    )
    store = s3_store(s3_bucket)
    sent: list[int] = []
    try:
        await store.put_file(key, source, progress=sent.append)
        await store.get_file(key, tmp_path / "out", sha256=digest)
    finally:
        await store.close()
    assert sum(sent) == THREE_PARTS - 5 * MIB
    assert client.list_multipart_uploads(Bucket=s3_bucket.bucket).get("Uploads", []) == []


async def test_upload_left_without_checksums_is_resumed_without_checksums(
    s3_bucket: S3Target, tmp_path: Path
) -> None:
    source, digest = random_file(tmp_path / "layer", THREE_PARTS)
    key = blob_key("sha256:" + digest)
    full = s3_bucket.key(key)
    # As a server without flexible checksums would have it: no checksum algorithm.
    client = s3_bucket.client()
    upload = client.create_multipart_upload(Bucket=s3_bucket.bucket, Key=full)
    assert upload.get("ChecksumAlgorithm") is None
    client.upload_part(
        Bucket=s3_bucket.bucket,
        Key=full,
        UploadId=upload["UploadId"],
        PartNumber=1,
        Body=source.read_bytes()[: 5 * MIB],
    )
    store = s3_store(s3_bucket)
    sent: list[int] = []
    try:
        await store.put_file(key, source, progress=sent.append)
        await store.get_file(key, tmp_path / "out", sha256=digest)
    finally:
        await store.close()
    assert sum(sent) == THREE_PARTS - 5 * MIB


async def test_new_uploads_carry_crc32_part_checksums(s3_bucket: S3Target, tmp_path: Path) -> None:
    source, digest = random_file(tmp_path / "layer", THREE_PARTS)
    key = blob_key("sha256:" + digest)
    store = s3_store(s3_bucket)
    try:
        await store.put_file(key, source)
    finally:
        await store.close()
    head = s3_bucket.client().head_object(
        Bucket=s3_bucket.bucket, Key=s3_bucket.key(key), ChecksumMode="ENABLED"
    )
    assert head["ChecksumCRC32"]


async def test_resumed_part_whose_content_differs_is_sent_again(
    s3_bucket: S3Target, tmp_path: Path
) -> None:
    source, digest = random_file(tmp_path / "layer", THREE_PARTS)
    key = "jobs/j1/output.bin"
    client = s3_bucket.client()
    full = s3_bucket.key(key)
    upload = client.create_multipart_upload(Bucket=s3_bucket.bucket, Key=full)["UploadId"]
    stale = os.urandom(5 * MIB)  # same size as part 1, other bytes (an older file)
    client.upload_part(Bucket=s3_bucket.bucket, Key=full, UploadId=upload, PartNumber=1, Body=stale)
    store = s3_store(s3_bucket)
    sent: list[int] = []
    try:
        await store.put_file(key, source, progress=sent.append)
        await store.get_file(key, tmp_path / "out", sha256=digest)
    finally:
        await store.close()
    assert sum(sent) == THREE_PARTS


async def test_download_with_wrong_digest_raises_and_leaves_no_partial_file(
    s3_bucket: S3Target, tmp_path: Path
) -> None:
    store = s3_store(s3_bucket)
    source, _ = random_file(tmp_path / "layer", THREE_PARTS)
    key = blob_key("sha256:" + "a" * 64)  # a name that does not match the content
    dest = tmp_path / "dest" / "layer"
    try:
        await store.put_file(key, source)
        with pytest.raises(IntegrityError, match="does not match its digest"):
            await store.get_file(key, dest, sha256="a" * 64)
    finally:
        await store.close()
    assert list((tmp_path / "dest").iterdir()) == []


async def test_download_of_a_missing_key_raises_object_not_found(
    s3_bucket: S3Target, tmp_path: Path
) -> None:
    store = s3_store(s3_bucket)
    try:
        with pytest.raises(ObjectNotFound, match="no such object"):
            await store.get_file("jobs/none", tmp_path / "x")
        with pytest.raises(ObjectNotFound):
            await store.get_bytes("jobs/none")
    finally:
        await store.close()
    assert not (tmp_path / "x").exists()


async def test_list_is_relative_to_the_prefix_and_delete_removes(s3_bucket: S3Target) -> None:
    store = s3_store(s3_bucket)
    try:
        for key in ("blobs/sha256/b.tar.zst", "blobs/sha256/a.tar.zst", "jobs/j1/log"):
            await store.put_bytes(key, b"x")
        assert await store.list("blobs/") == ["blobs/sha256/a.tar.zst", "blobs/sha256/b.tar.zst"]
        await store.delete("jobs/j1/log")
        await store.delete("jobs/j1/never-existed")
        assert await store.list() == ["blobs/sha256/a.tar.zst", "blobs/sha256/b.tar.zst"]
    finally:
        await store.close()


async def test_presigned_url_downloads_with_a_plain_http_client(
    s3_bucket: S3Target, tmp_path: Path
) -> None:
    store = s3_store(s3_bucket)
    source, digest = random_file(tmp_path / "layer", 3000)
    try:
        await store.put_file(blob_key("sha256:" + digest), source)
        url = await store.presign(blob_key("sha256:" + digest), expires_s=600)
    finally:
        await store.close()
    assert url is not None and "X-Amz-Signature=" in url
    async with httpx.AsyncClient() as client:  # no AWS credentials involved
        response = await client.get(url)
    assert response.status_code == 200
    assert hashlib.sha256(response.content).hexdigest() == digest


async def test_presign_refuses_an_expiry_beyond_seven_days(s3_bucket: S3Target) -> None:
    from j2c_server.core.errors import InvalidInput

    store = s3_store(s3_bucket)
    with pytest.raises(InvalidInput) as caught:
        await store.presign("jobs/x", expires_s=8 * 24 * 3600)
    assert caught.value.field == "storage.presign_expiry_s"


async def test_endpoint_from_aws_endpoint_url_is_used_when_settings_name_none(
    s3_bucket: S3Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_bucket.endpoint)
    settings = s3_bucket.settings.model_copy(update={"endpoint_url": None})
    store = open_store(s3_bucket.url, settings)
    try:
        await store.put_bytes("jobs/j1/x", b"via env")
    finally:
        await store.close()
    body = s3_bucket.client().get_object(Bucket=s3_bucket.bucket, Key=s3_bucket.key("jobs/j1/x"))
    assert body["Body"].read() == b"via env"


def test_store_can_be_used_by_successive_event_loops(s3_bucket: S3Target) -> None:
    import asyncio

    store = s3_store(s3_bucket)

    async def put_then_close() -> None:
        await store.put_bytes("jobs/j1/x", b"first loop")
        await store.close()

    async def get_then_close() -> bytes:
        try:
            return await store.get_bytes("jobs/j1/x")
        finally:
            await store.close()

    asyncio.run(put_then_close())
    assert asyncio.run(get_then_close()) == b"first loop"
