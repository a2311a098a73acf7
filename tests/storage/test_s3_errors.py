"""Storage failures reach the user as StorageError messages that say what to check.

Credential errors come from a moto server with IAM authentication switched on (real signature
checks); clock skew, which moto does not check, comes from the fault proxy answering with the
error S3 sends. No secret appears in any message.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from j2c_server.core.errors import StorageError
from j2c_server.storage import open_store
from tests.storage.conftest import AuthServer, free_port
from tests.storage.fault_proxy import FaultProxy
from tests.support.s3 import S3Target, s3_settings


def use_keys(monkeypatch: pytest.MonkeyPatch, key_id: str, secret: str) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)


async def put_through(url: str, settings: object, tmp_path: Path) -> None:
    source = tmp_path / "payload"
    source.write_bytes(b"payload")
    store = open_store(url, settings)  # type: ignore[arg-type]
    try:
        await store.put_file("jobs/j1/payload", source)
    finally:
        await store.close()


async def test_valid_credentials_work_on_the_authenticating_server(
    auth_moto: AuthServer, s3_credentials: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    use_keys(monkeypatch, auth_moto.writer.access_key_id, auth_moto.writer.secret_access_key)
    await put_through(f"s3://{auth_moto.bucket}/ok", s3_settings(auth_moto.endpoint), tmp_path)


async def test_unknown_access_key_id_says_to_check_the_key_id(
    auth_moto: AuthServer, s3_credentials: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    use_keys(monkeypatch, "AKIAJ2CUNKNOWNKEY000", "whatever-secret-value")
    with pytest.raises(StorageError) as caught:
        await put_through(f"s3://{auth_moto.bucket}/p", s3_settings(auth_moto.endpoint), tmp_path)
    assert "does not know the access key id" in caught.value.message
    assert "AWS_ACCESS_KEY_ID" in (caught.value.hint or "")
    assert "AKIAJ2CUNKNOWNKEY000" not in str(caught.value)


async def test_wrong_secret_says_to_check_the_secret_key(
    auth_moto: AuthServer, s3_credentials: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    use_keys(monkeypatch, auth_moto.writer.access_key_id, "not-the-right-secret-key")
    with pytest.raises(StorageError) as caught:
        await put_through(f"s3://{auth_moto.bucket}/p", s3_settings(auth_moto.endpoint), tmp_path)
    assert "rejected the request signature" in caught.value.message
    assert "check the secret key" in (caught.value.hint or "")
    assert "not-the-right-secret-key" not in str(caught.value)
    assert auth_moto.writer.access_key_id not in str(caught.value)


async def test_missing_permission_says_access_denied_and_names_the_bucket(
    auth_moto: AuthServer, s3_credentials: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    use_keys(monkeypatch, auth_moto.nobody.access_key_id, auth_moto.nobody.secret_access_key)
    with pytest.raises(StorageError) as caught:
        await put_through(f"s3://{auth_moto.bucket}/p", s3_settings(auth_moto.endpoint), tmp_path)
    assert f"access denied to bucket '{auth_moto.bucket}'" in caught.value.message
    assert "s3:PutObject" in (caught.value.hint or "")


async def test_head_of_a_blob_without_permission_is_diagnosed_as_access_denied(
    auth_moto: AuthServer, s3_credentials: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_keys(monkeypatch, auth_moto.nobody.access_key_id, auth_moto.nobody.secret_access_key)
    store = open_store(f"s3://{auth_moto.bucket}/p", s3_settings(auth_moto.endpoint))
    try:
        with pytest.raises(StorageError, match="access denied"):
            await store.exists("blobs/sha256/abc.tar.zst")
    finally:
        await store.close()


async def test_missing_bucket_says_it_does_not_exist(s3_bucket: S3Target, tmp_path: Path) -> None:
    with pytest.raises(StorageError) as caught:
        await put_through("s3://j2c-no-such-bucket/p", s3_bucket.settings, tmp_path)
    assert "bucket 'j2c-no-such-bucket'" in caught.value.message
    assert "does not exist" in caught.value.message
    assert caught.value.field == "storage.url"


async def test_unreachable_endpoint_says_cannot_reach_and_names_the_setting(
    s3_credentials: None, tmp_path: Path
) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    settings = s3_settings(endpoint, max_attempts=2)
    with pytest.raises(StorageError) as caught:
        await put_through("s3://some-bucket/p", settings, tmp_path)
    assert f"cannot reach the store at {endpoint}" in caught.value.message
    assert "storage.endpoint_url" in (caught.value.hint or "")


async def test_clock_skew_says_to_synchronise_the_clock(
    s3_bucket: S3Target, fault_proxy: FaultProxy, tmp_path: Path
) -> None:
    fault_proxy.canned = (
        403,
        "RequestTimeTooSkewed",
        "The difference between the request time and the current time is too large.",
    )
    target = s3_bucket.via(fault_proxy.url)
    with pytest.raises(StorageError) as caught:
        await put_through("s3://j2c-any-bucket/p", target.settings, tmp_path)
    assert "clock" in caught.value.message
    assert "NTP" in (caught.value.hint or "")


async def test_no_credentials_at_all_says_where_credentials_come_from(
    s3_bucket: S3Target, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(StorageError) as caught:
        await put_through(s3_bucket.url, s3_bucket.settings, tmp_path)
    assert "no storage credentials found" in caught.value.message
    assert "AWS_PROFILE" in (caught.value.hint or "")


async def test_unknown_profile_names_the_profile_setting(
    s3_bucket: S3Target, tmp_path: Path
) -> None:
    settings = s3_bucket.settings.model_copy(update={"profile": "j2c-no-such-profile"})
    with pytest.raises(StorageError) as caught:
        await put_through(s3_bucket.url, settings, tmp_path)
    assert caught.value.field == "storage.profile"
