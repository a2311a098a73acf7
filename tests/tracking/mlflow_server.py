"""A real MLflow tracking server for the tracking tests: ``mlflow server`` with a SQLite
backend store and its artifacts on the session's moto S3 server (served through the tracking
server, so a job logs artifacts with no S3 credentials of its own).

Started once per test module (it takes tens of seconds on a busy machine), in its own process
group, which is stopped at the end.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.s3 import FAKE_ACCESS_KEY_ID, FAKE_SECRET_ACCESS_KEY, REGION, boto3_client

START_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class MlflowServer:
    url: str
    bucket: str
    endpoint: str

    def get(self, path: str, **params: str) -> dict[str, Any]:
        response = httpx.get(f"{self.url}/api/2.0/mlflow/{path}", params=params, timeout=10)
        response.raise_for_status()
        body: dict[str, Any] = response.json()
        return body

    def run(self, run_id: str) -> dict[str, Any]:
        run: dict[str, Any] = self.get("runs/get", run_id=run_id)["run"]
        return run

    def artifact_keys(self) -> list[str]:
        listed = boto3_client(
            self.endpoint,
            aws_access_key_id=FAKE_ACCESS_KEY_ID,
            aws_secret_access_key=FAKE_SECRET_ACCESS_KEY,
        ).list_objects_v2(Bucket=self.bucket)
        return [item["Key"] for item in listed.get("Contents", [])]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def mlflow_server(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    folder = tmp_path_factory.mktemp("mlflow")
    bucket = f"mlflow-{uuid.uuid4().hex[:12]}"
    boto3_client(
        moto_endpoint,
        aws_access_key_id=FAKE_ACCESS_KEY_ID,
        aws_secret_access_key=FAKE_SECRET_ACCESS_KEY,
    ).create_bucket(Bucket=bucket)
    port = _free_port()
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": FAKE_ACCESS_KEY_ID,
        "AWS_SECRET_ACCESS_KEY": FAKE_SECRET_ACCESS_KEY,
        "AWS_DEFAULT_REGION": REGION,
        "MLFLOW_S3_ENDPOINT_URL": moto_endpoint,
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
    }
    log = (folder / "server.log").open("wb")
    process = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "mlflow"),
            "server",
            "--backend-store-uri",
            f"sqlite:///{folder / 'mlflow.db'}",
            "--artifacts-destination",
            f"s3://{bucket}/mlflow",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                log.flush()
                pytest.fail(f"mlflow server did not start:\n{(folder / 'server.log').read_text()}")
            time.sleep(0.5)
        yield MlflowServer(url=url, bucket=bucket, endpoint=moto_endpoint)
    finally:
        _stop(process)
        log.close()


def _stop(process: subprocess.Popen[bytes]) -> None:
    """The server and what it started (its own process group, left nothing behind)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=15)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=15)
