"""download_uri: one object by URI (file://, s3://, presigned https://), verified (j2c-unpack)."""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

import pytest

from j2c_server.core.errors import IntegrityError, InvalidInput, StorageError
from j2c_server.storage import ObjectNotFound, download_uri, open_store
from tests.storage.fault_proxy import FaultProxy
from tests.support.s3 import S3Target


def payload(tmp_path: Path, size: int = 100_000) -> tuple[Path, str]:
    data = os.urandom(size)
    path = tmp_path / "src.bin"
    path.write_bytes(data)
    return path, hashlib.sha256(data).hexdigest()


async def upload(target: S3Target, key: str, source: Path, *, presign: bool = False) -> str | None:
    store = open_store(target.url, target.settings)
    try:
        await store.put_file(key, source)
        return await store.presign(key, expires_s=600) if presign else None
    finally:
        await store.close()


async def test_file_uri_is_copied_and_verified(tmp_path: Path) -> None:
    source, digest = payload(tmp_path)
    moved: list[int] = []
    await download_uri(source.as_uri(), tmp_path / "out", digest, moved.append)
    assert (tmp_path / "out").read_bytes() == source.read_bytes()
    assert sum(moved) == source.stat().st_size


async def test_file_uri_with_wrong_digest_leaves_nothing(tmp_path: Path) -> None:
    source, _ = payload(tmp_path)
    with pytest.raises(IntegrityError):
        await download_uri(source.as_uri(), tmp_path / "out" / "x", "f" * 64)
    assert list((tmp_path / "out").iterdir()) == []


async def test_missing_file_uri_raises_object_not_found(tmp_path: Path) -> None:
    with pytest.raises(ObjectNotFound):
        await download_uri((tmp_path / "absent").as_uri(), tmp_path / "out")


async def test_s3_uri_downloads_with_settings_from_the_environment(
    s3_bucket: S3Target, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, digest = payload(tmp_path)
    await upload(s3_bucket, "blobs/sha256/x.tar.zst", source)
    # What a job container gets: J2C_STORAGE__* variables, no config file.
    monkeypatch.setenv("J2C_STORAGE__ENDPOINT_URL", s3_bucket.endpoint)
    monkeypatch.setenv("J2C_STORAGE__ADDRESSING_STYLE", "path")
    uri = f"s3://{s3_bucket.bucket}/{s3_bucket.key('blobs/sha256/x.tar.zst')}"
    await download_uri(uri, tmp_path / "out", digest)
    assert (tmp_path / "out").read_bytes() == source.read_bytes()


async def test_presigned_https_uri_downloads_without_credentials(
    s3_bucket: S3Target, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, digest = payload(tmp_path)
    url = await upload(s3_bucket, "blobs/sha256/y.tar.zst", source, presign=True)
    assert url is not None
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    await download_uri(url, tmp_path / "out", digest)
    assert (tmp_path / "out").read_bytes() == source.read_bytes()


async def test_presigned_download_logs_no_signature(
    s3_bucket: S3Target, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source, digest = payload(tmp_path)
    url = await upload(s3_bucket, "blobs/sha256/z.tar.zst", source, presign=True)
    assert url is not None
    signature = url.split("X-Amz-Signature=")[1]
    with caplog.at_level(logging.DEBUG):
        await download_uri(url, tmp_path / "out", digest)
    # Only the client's side counts: "werkzeug" is the moto server's own request log.
    client_log = "\n".join(r.getMessage() for r in caplog.records if r.name != "werkzeug")
    assert "X-Amz-Signature=REDACTED" in client_log
    assert signature not in client_log


async def test_expired_presigned_url_is_refused_with_a_resubmit_hint(
    s3_bucket: S3Target, fault_proxy: FaultProxy, tmp_path: Path
) -> None:
    # moto does not check presigned signatures or expiry: the proxy answers as S3 does.
    target = s3_bucket.via(fault_proxy.url)
    source, _ = payload(tmp_path)
    url = await upload(target, "blobs/sha256/t.tar.zst", source, presign=True)
    assert url is not None
    fault_proxy.canned = (403, "AccessDenied", "Request has expired")
    fault_proxy.reset_counters()
    with pytest.raises(StorageError) as caught:
        await download_uri(url, tmp_path / "out")
    assert "refused the URL (HTTP 403)" in caught.value.message
    assert "resubmit" in (caught.value.hint or "")
    assert url.split("X-Amz-Signature=")[1] not in str(caught.value)
    assert fault_proxy.requests == 1  # a refusal is not retried
    assert not (tmp_path / "out").exists()


async def test_presigned_url_of_a_missing_object_raises_object_not_found(
    s3_bucket: S3Target, tmp_path: Path
) -> None:
    store = open_store(s3_bucket.url, s3_bucket.settings)
    try:
        url = await store.presign("blobs/sha256/never-uploaded.tar.zst")
    finally:
        await store.close()
    assert url is not None
    with pytest.raises(ObjectNotFound):
        await download_uri(url, tmp_path / "out")


@pytest.mark.parametrize("uri", ["ftp://host/x", "gs://b/k", "relative/x", "s3://"])
async def test_unsupported_or_malformed_uri_is_invalid_input_on_uri(
    uri: str, tmp_path: Path
) -> None:
    with pytest.raises(InvalidInput) as caught:
        await download_uri(uri, tmp_path / "out")
    assert caught.value.field == "uri"
