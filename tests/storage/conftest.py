"""Fixtures of the storage tests: the fault-injecting proxy and a moto server that checks
credentials (IAM authentication on, in its own process so it cannot affect other tests)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.storage.fault_proxy import FaultProxy
from tests.support.s3 import REGION, boto3_client


@pytest.fixture
def fault_proxy(moto_endpoint: str) -> Iterator[FaultProxy]:
    """A proxy in front of the session's moto server; it fails nothing until told to."""
    proxy = FaultProxy(moto_endpoint).start()
    yield proxy
    proxy.stop()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


@dataclass(frozen=True)
class Keys:
    access_key_id: str
    secret_access_key: str


@dataclass(frozen=True)
class AuthServer:
    """A moto server that authenticates: ``writer`` may do anything, ``nobody`` nothing."""

    endpoint: str
    bucket: str
    writer: Keys
    nobody: Keys


def _user_with_keys(iam: Any, name: str, policy: dict[str, Any] | None) -> Keys:
    iam.create_user(UserName=name)
    if policy is not None:
        iam.put_user_policy(UserName=name, PolicyName="all", PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return Keys(key["AccessKeyId"], key["SecretAccessKey"])


@pytest.fixture(scope="session")
def auth_moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthServer]:
    port = free_port()
    log = tmp_path_factory.mktemp("auth-moto") / "moto.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ACCESS_KEY_ID="admin", AWS_SECRET_ACCESS_KEY="admin", AWS_DEFAULT_REGION=REGION)
    with Path(log).open("wb") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        wait_for_port(port)
        endpoint = f"http://127.0.0.1:{port}"
        import boto3

        admin = {"aws_access_key_id": "admin", "aws_secret_access_key": "admin"}
        iam = boto3.client("iam", endpoint_url=endpoint, region_name=REGION, **admin)
        allow_all = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}],
        }
        writer = _user_with_keys(iam, "j2c-writer", allow_all)
        nobody = _user_with_keys(iam, "j2c-nobody", None)
        boto3_client(endpoint, **admin).create_bucket(Bucket="j2c-auth-bucket")
        # From now on every request must carry valid credentials.
        urllib.request.urlopen(
            urllib.request.Request(
                f"{endpoint}/moto-api/reset-auth",
                data=b"0",
                method="POST",
                headers={"Content-Type": "text/plain"},
            )
        ).close()
        yield AuthServer(endpoint, "j2c-auth-bucket", writer, nobody)
    finally:
        server.terminate()
        server.wait(timeout=10)
