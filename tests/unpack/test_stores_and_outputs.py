"""Where layers come from (file://, http(s):// presigned-style URLs, s3://) and where outputs go.

HTTP is served by a real ``http.server`` on 127.0.0.1 (plain HTTP: the same urllib code path as
HTTPS minus TLS, for which no certificate can be issued here). S3 is the session's moto server.
"""

from __future__ import annotations

import asyncio
import functools
import http.server
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from j2c_server.pack import PackSpec, make_manifest, pack, publish
from j2c_server.storage import open_store
from j2c_server.unpack.errors import ExitCode
from j2c_server.wire.manifest import Manifest
from tests.support.s3 import S3Target
from tests.unpack.conftest import SmallJob
from tests.unpack.helpers import run_unpack

RAN = "USER CODE RAN"


@pytest.fixture
def http_store(store: Path) -> Iterator[str]:
    """The file store served over HTTP; its base URL."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(store))
    handler.log_message = lambda *args: None  # type: ignore[assignment,method-assign]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def over_http(file_uri: str, store: Path, base: str) -> str:
    return base + "/" + Path(file_uri.removeprefix("file://")).relative_to(store).as_posix()


def test_layers_next_to_an_http_manifest_are_fetched_over_http(
    small_job: SmallJob, http_store: str, tmp_path: Path
):
    uri = over_http(small_job.publish(), small_job.store, http_store)
    done = run_unpack(
        uri + "?X-Amz-Signature=j2cSignatureValue42", "--workdir", str(tmp_path / "job")
    )
    assert done.returncode == 0, done.stderr
    assert RAN in done.stdout
    assert f"from {http_store}/blobs/sha256/" in done.stderr
    assert "j2cSignatureValue42" not in done.stderr


def test_a_layer_url_in_the_manifest_is_used(small_job: SmallJob, http_store: str, tmp_path: Path):
    file_uri = small_job.publish()
    manifest = Manifest.model_validate_json(Path(file_uri.removeprefix("file://")).read_bytes())
    layers = [
        layer.model_copy(
            update={"url": f"{http_store}/blobs/sha256/{layer.digest[7:]}.tar.zst?sig=s3cr3t"}
        )
        for layer in manifest.layers
    ]
    resolved = small_job.store / "jobs" / "job-1" / "manifest.json"
    resolved.parent.mkdir(parents=True)
    resolved.write_bytes(manifest.model_copy(update={"layers": layers}).canonical_json())
    done = run_unpack(resolved.as_uri(), "--workdir", str(tmp_path / "job"))
    assert done.returncode == 0, done.stderr
    assert done.stderr.count(f"from {http_store}/blobs/") == 2
    assert "s3cr3t" not in done.stderr


def test_a_layer_missing_over_http_is_missing(small_job: SmallJob, http_store: str, tmp_path: Path):
    uri = small_job.publish()
    for blob in (small_job.store / "blobs" / "sha256").iterdir():
        blob.unlink()
    done = run_unpack(over_http(uri, small_job.store, http_store), "--workdir", str(tmp_path / "j"))
    assert done.returncode == ExitCode.MISSING
    assert "HTTP 404" in done.stderr


def test_an_unreachable_http_store_is_unavailable_after_retries(store: Path, tmp_path: Path):
    uri = f"http://127.0.0.1:{refused_port()}/manifests/sha256/{'0' * 64}.json"
    done = run_unpack(uri, "--workdir", str(tmp_path / "job"), timeout=60)
    assert done.returncode == ExitCode.UNAVAILABLE
    assert done.stderr.count("retrying") == 3


def test_layers_are_fetched_from_s3(small_job: SmallJob, s3_bucket: S3Target, tmp_path: Path):
    result = pack(
        PackSpec(code_path=small_job.project, call_path="job.py", venv_path=small_job.venv),
        tmp_path / "cache",
    )
    s3 = open_store(s3_bucket.url, s3_bucket.settings)
    published = asyncio.run(publish(s3, result, make_manifest(result)))
    done = run_unpack(
        published.manifest_uri, "--workdir", str(tmp_path / "job"), env=s3_environment(s3_bucket)
    )
    assert done.returncode == 0, done.stderr
    assert RAN in done.stdout
    assert f"from s3://{s3_bucket.bucket}/prefix/blobs/sha256/" in done.stderr


def test_outputs_are_uploaded_to_the_output_uri(small_job: SmallJob, tmp_path: Path):
    outputs = tmp_path / "store-out" / "jobs" / "job-1" / "outputs"
    done = run_unpack(
        small_job.publish(), "--workdir", str(tmp_path / "job"), "--output-uri", outputs.as_uri()
    )
    assert done.returncode == 0, done.stderr
    assert (outputs / "result.txt").read_text() == "done"


def test_outputs_are_uploaded_after_a_failed_run_too(small_job: SmallJob, tmp_path: Path):
    outputs = tmp_path / "store-out" / "outputs"
    done = run_unpack(
        small_job.publish(),
        "--workdir",
        str(tmp_path / "job"),
        "--output-uri",
        outputs.as_uri(),
        user_args=["5"],
    )
    assert done.returncode == 5
    assert (outputs / "result.txt").read_text() == "done"


def test_outputs_go_to_s3(small_job: SmallJob, s3_bucket: S3Target, tmp_path: Path):
    done = run_unpack(
        small_job.publish(),
        "--workdir",
        str(tmp_path / "job"),
        "--output-uri",
        f"{s3_bucket.url}/jobs/job-1/outputs",
        env=s3_environment(s3_bucket),
    )
    assert done.returncode == 0, done.stderr
    body = s3_bucket.client().get_object(
        Bucket=s3_bucket.bucket, Key=s3_bucket.key("jobs/job-1/outputs/result.txt")
    )["Body"]
    assert body.read() == b"done"


def test_an_output_upload_failure_fails_a_successful_run(small_job: SmallJob, tmp_path: Path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the store should be")
    done = run_unpack(
        small_job.publish(), "--workdir", str(tmp_path / "job"), "--output-uri", blocker.as_uri()
    )
    assert done.returncode == ExitCode.OUTPUTS
    assert "uploading outputs" in done.stderr


def s3_environment(target: S3Target) -> dict[str, str]:
    """The job's environment: AWS credentials (set by the fixture) and the endpoint setting."""
    return {
        **os.environ,
        "J2C_STORAGE__ENDPOINT_URL": target.endpoint,
        "J2C_STORAGE__ADDRESSING_STYLE": "path",
        "J2C_STORAGE__REGION": "us-east-1",
    }


def refused_port() -> int:
    """A loopback port with nothing listening on it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
