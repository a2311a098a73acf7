"""S3 fixtures for every test folder: a real moto server on loopback and fresh buckets.

- ``moto_endpoint`` (session): ``moto.server.ThreadedMotoServer`` on 127.0.0.1 and a free port,
  speaking real HTTP; clients reach it like any S3-compatible server (path-style addressing).
- ``s3_credentials``: fake AWS keys in the environment for one test, with the user's own
  ``~/.aws`` files, profile, session token and endpoint variables hidden.
- ``s3_bucket``: a new, empty bucket for one test, as :class:`S3Target` (its ``url`` is
  ``s3://<bucket>/prefix`` and its ``settings`` point j2c at the server).

Usage: ``def test_x(s3_bucket: S3Target): store = open_store(s3_bucket.url, s3_bucket.settings)``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from j2c_server.config import StorageSettings

FAKE_ACCESS_KEY_ID = "AKIAJ2CTESTFAKEKEY00"
FAKE_SECRET_ACCESS_KEY = "j2c-test-fake-secret-not-a-real-one"
REGION = "us-east-1"

# Variables that could point a test at a real account or endpoint.
_AWS_VARIABLES = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
)


@dataclass(frozen=True)
class S3Target:
    """One test's bucket: where it is and the settings that reach it."""

    bucket: str
    prefix: str
    endpoint: str
    settings: StorageSettings

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def key(self, key: str) -> str:
        """The full S3 key of a store key (with the prefix)."""
        return f"{self.prefix}/{key}"

    def via(self, endpoint: str, **settings: Any) -> S3Target:
        """The same bucket reached through another endpoint (e.g. a proxy), other settings."""
        changed = self.settings.model_copy(update={"endpoint_url": endpoint, **settings})
        return replace(self, endpoint=endpoint, settings=changed)

    def client(self) -> Any:
        """A plain boto3 client on the moto server, for setting up and checking state."""
        return boto3_client(self.endpoint)


def boto3_client(endpoint: str, **kwargs: Any) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        config=Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1}),
        **kwargs,
    )


def s3_settings(endpoint: str, **overrides: Any) -> StorageSettings:
    """Settings for tests: small parts, quick retries, short timeouts."""
    values: dict[str, Any] = {
        "endpoint_url": endpoint,
        "region": REGION,
        "addressing_style": "path",
        "part_size_mb": 5,
        "concurrency": 3,
        "max_attempts": 8,
        "connect_timeout_s": 5.0,
        "read_timeout_s": 30.0,
    }
    values.update(overrides)
    return StorageSettings(**values)


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """URL of a moto S3 server (server mode, real HTTP) shared by the whole session."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Fake credentials in the environment; nothing of the user's AWS set-up is visible."""
    for name in _AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", FAKE_ACCESS_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", FAKE_SECRET_ACCESS_KEY)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config-absent"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials-absent"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture
def s3_bucket(moto_endpoint: str, s3_credentials: None) -> S3Target:
    """A fresh bucket on the moto server for this test."""
    bucket = f"j2c-test-{uuid.uuid4().hex[:16]}"
    boto3_client(moto_endpoint).create_bucket(Bucket=bucket)
    return S3Target(
        bucket=bucket,
        prefix="prefix",
        endpoint=moto_endpoint,
        settings=s3_settings(moto_endpoint),
    )
