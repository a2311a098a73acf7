"""A job's storage settings: the ``J2C_STORAGE__*`` environment only (it has no config file).

A ``file://`` store reads just ``storage.shared``, without the settings model (no pydantic in a
job that writes its outputs to a shared folder); another scheme validates the whole section,
and a bad value is refused naming ``storage.<key>``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from j2c_server.core.errors import ConfigError
from j2c_server.storage import FileStore, open_store_from_env
from j2c_server.storage.download import settings_from_env, shared_from_env, storage_env


@pytest.mark.parametrize(
    ("value", "shared"), [("true", True), ("TRUE", True), ("1", True), ("no", False), ("0", False)]
)
def test_shared_is_read_as_the_settings_read_it(value: str, shared: bool) -> None:
    environ = {"J2C_STORAGE__SHARED": value}
    assert shared_from_env(environ) is shared
    assert settings_from_env(environ).shared is shared


def test_a_bad_value_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError) as info:
        shared_from_env({"J2C_STORAGE__SHARED": "sometimes"})
    assert info.value.field == "storage.shared"
    with pytest.raises(ConfigError) as info:
        settings_from_env({"J2C_STORAGE__PART_SIZE_MB": "1"})
    assert info.value.field == "storage.part_size_mb"
    assert "J2C_STORAGE__* environment" in info.value.message
    with pytest.raises(ConfigError) as info:
        settings_from_env({"J2C_STORAGE__BOGUS": "1"})
    assert info.value.field == "storage.bogus"


def test_only_storage_variables_count() -> None:
    environ = {"J2C_STORAGE__Region": "eu", "J2C_STORAGEX": "1", "J2C_PACK__THREADS": "2"}
    assert storage_env(environ) == {"region": "eu"}
    assert shared_from_env({}) is False


def test_a_file_store_from_the_env_is_shared_without_pydantic(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from j2c_server.storage import open_store_from_env\n"
        f"store = open_store_from_env({tmp_path.as_uri()!r})\n"
        "print(type(store).__name__, store.shared, 'pydantic' in sys.modules)\n"
    )
    env = {"J2C_STORAGE__SHARED": "true"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["FileStore", "True", "False"]


def test_an_s3_store_from_the_env_takes_its_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("J2C_STORAGE__ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("J2C_STORAGE__MAX_ATTEMPTS", "2")
    from j2c_server.storage.s3 import S3Store

    store = open_store_from_env("s3://bucket/prefix")
    assert isinstance(store, S3Store) and store.uri("k") == "s3://bucket/prefix/k"
    assert store.settings.endpoint_url == "http://127.0.0.1:9"
    assert store.settings.max_attempts == 2
    assert isinstance(open_store_from_env("file:///srv/j2c"), FileStore)
