"""open_store: which URLs make which store, and bad URLs refused before any I/O."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from j2c_server.config import StorageSettings
from j2c_server.core.errors import InvalidInput
from j2c_server.storage import FileStore, ObjectStore, open_store
from j2c_server.storage.s3 import S3Store


def test_file_url_opens_a_file_store_at_its_path(tmp_path: Path) -> None:
    store = open_store(tmp_path.as_uri())
    assert isinstance(store, FileStore)
    assert isinstance(store, ObjectStore)
    assert store.root == tmp_path
    assert store.uri("blobs/x") == (tmp_path / "blobs" / "x").as_uri()


def test_s3_url_opens_an_s3_store_on_bucket_and_prefix() -> None:
    settings = StorageSettings(endpoint_url="http://127.0.0.1:9")
    store = open_store("s3://my-bucket/team/j2c/", settings)
    assert isinstance(store, S3Store)
    assert isinstance(store, ObjectStore)
    assert (store.bucket, store.prefix, store.settings) == ("my-bucket", "team/j2c", settings)
    assert store.uri("blobs/x") == "s3://my-bucket/team/j2c/blobs/x"


def test_s3_url_without_prefix_uses_the_bucket_root() -> None:
    assert open_store("s3://my-bucket").uri("k") == "s3://my-bucket/k"


@pytest.mark.parametrize(
    "url",
    [
        "ftp://host/store",
        "gs://bucket/prefix",
        "/plain/path",
        "relative/path",
        "",
    ],
)
def test_unsupported_scheme_is_invalid_input_on_storage_url(url: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        open_store(url)
    assert caught.value.field == "storage.url"
    assert "s3://bucket/prefix" in (caught.value.hint or "")


@pytest.mark.parametrize("url", ["s3://", "s3:///prefix", "s3:///"])
def test_s3_url_without_bucket_is_invalid_input(url: str) -> None:
    with pytest.raises(InvalidInput, match="names no bucket") as caught:
        open_store(url)
    assert caught.value.field == "storage.url"


def test_s3_url_with_an_invalid_bucket_name_is_invalid_input() -> None:
    with pytest.raises(InvalidInput, match="not a valid bucket name") as caught:
        open_store("s3://-bad!/x")
    assert caught.value.field == "storage.url"


def test_s3_url_with_dot_dot_in_the_prefix_is_invalid_input() -> None:
    with pytest.raises(InvalidInput, match="not a valid key prefix"):
        open_store("s3://bucket/a/../b")


def test_s3_url_with_credentials_is_refused_without_echoing_them() -> None:
    with pytest.raises(InvalidInput) as caught:
        open_store("s3://AKIAEXAMPLE:supersecret@bucket/prefix")
    assert caught.value.field == "storage.url"
    assert "supersecret" not in str(caught.value)
    assert "AKIAEXAMPLE" not in str(caught.value)


def test_file_url_with_a_host_is_invalid_input() -> None:
    with pytest.raises(InvalidInput, match="absolute path") as caught:
        open_store("file://relative/store")
    assert caught.value.field == "storage.url"
    assert "file:///" in (caught.value.hint or "")


def test_url_with_a_query_is_invalid_input() -> None:
    with pytest.raises(InvalidInput, match="no query"):
        open_store("s3://bucket/prefix?versionId=3")


def test_importing_the_storage_package_loads_neither_aiobotocore_nor_httpx() -> None:
    code = (
        "import sys, j2c_server.storage; "
        "print(sorted(m for m in ('aiobotocore', 'httpx', 'aiohttp') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
