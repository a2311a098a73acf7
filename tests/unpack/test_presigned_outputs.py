"""A presigned job's outputs go up through its upload policy (storage/post_upload.py), with no
storage credentials at all, against a real moto S3 server (server mode, real HTTP POSTs).

moto does not enforce a POST policy: its form-upload handler (moto 5.2) checks neither the
signature nor the conditions and stores whatever key the form names. So "a key outside the
prefix is refused by the store" cannot be shown against it. What is asserted instead: the
policy the server signs carries the ``starts-with`` condition on ``$key`` for the job's own
prefix, the size range and the expiry, and its signature is the SigV4 signature of exactly that
policy under the server's key (so S3 holds the job to those conditions); the uploader itself
never sends a key outside its prefix; and a store's refusal reaches the job's log with its
reason (a loopback server answering S3's error document for that one case).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import http.server
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from j2c_server.core.errors import InvalidInput, StorageError
from j2c_server.storage import open_store
from j2c_server.storage.post_upload import ENV_NAME, PostPolicy, PostPolicyStore
from tests.support.projects import write
from tests.support.s3 import FAKE_SECRET_ACCESS_KEY, REGION, S3Target
from tests.unpack.conftest import SmallJob
from tests.unpack.helpers import run_unpack

WRITES = """\
import os, pathlib, sys
os.makedirs("models", exist_ok=True)
pathlib.Path("models/a.bin").write_bytes(bytes(range(256)) * 8)
pathlib.Path(os.environ["J2C_OUTPUT_DIR"], "metrics.json").write_text('{"loss": 0.5}')
"""


async def _policy(target: S3Target, prefix: str = "jobs/job-1/outputs/", **kw: int) -> PostPolicy:
    store = open_store(target.url, target.settings)
    try:
        policy = await store.presign_post(
            prefix, max_bytes=kw.get("max_bytes", 2_000_000), expires_s=kw.get("expires_s", 3600)
        )
    finally:
        await store.close()
    assert policy is not None
    return policy


def _no_credentials(target: S3Target, policy: PostPolicy) -> dict[str, str]:
    """The job's environment: its upload policy, and nothing that could sign a request."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("AWS_")}
    env["AWS_CONFIG_FILE"] = env["AWS_SHARED_CREDENTIALS_FILE"] = "/nonexistent"
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    env[ENV_NAME] = policy.to_json()
    return env


def test_a_job_without_credentials_uploads_its_outputs_through_its_policy(
    small_job: SmallJob, s3_bucket: S3Target, tmp_path: Path
) -> None:
    write(small_job.project / "job.py", WRITES)
    policy = asyncio.run(_policy(s3_bucket))
    done = run_unpack(
        small_job.publish(),
        "--workdir",
        str(tmp_path / "job"),
        "--output-uri",
        f"{s3_bucket.url}/jobs/job-1/outputs",
        env=_no_credentials(s3_bucket, policy),
    )
    assert done.returncode == 0, done.stderr
    client = s3_bucket.client()

    def stored(name: str) -> bytes:
        key = s3_bucket.key(f"jobs/job-1/outputs/{name}")
        body: bytes = client.get_object(Bucket=s3_bucket.bucket, Key=key)["Body"].read()
        return body

    model = bytes(range(256)) * 8
    assert stored("models/a.bin") == model
    assert stored("metrics.json") == b'{"loss": 0.5}'
    index = stored(".j2c-outputs.json")
    files = {item["name"]: item["sha256"] for item in json.loads(index)["files"]}
    assert files["models/a.bin"] == hashlib.sha256(model).hexdigest()
    assert f"index sha256:{hashlib.sha256(index).hexdigest()}" in done.stderr
    assert policy.fields["x-amz-signature"] not in done.stderr


async def test_the_policy_allows_only_the_jobs_prefix_size_and_lifetime_and_is_signed(
    s3_bucket: S3Target,
) -> None:
    before = time.time()
    policy = await _policy(s3_bucket, max_bytes=1234, expires_s=7200)
    document = json.loads(base64.b64decode(policy.fields["policy"]))
    prefix = s3_bucket.key("jobs/job-1/outputs/")
    assert policy.prefix == prefix
    assert ["starts-with", "$key", prefix] in document["conditions"]
    assert ["content-length-range", 0, 1234] in document["conditions"]
    assert {"bucket": s3_bucket.bucket} in document["conditions"]
    expires = time.mktime(time.strptime(document["expiration"], "%Y-%m-%dT%H:%M:%SZ"))
    expires -= time.timezone  # the document's time is UTC
    assert before + 7200 - 5 <= expires <= time.time() + 7200 + 5
    # SigV4 for a POST policy: HMAC of the base64 policy under the derived signing key.
    date, region, service = policy.fields["x-amz-credential"].split("/")[1:4]
    assert (region, service) == (REGION, "s3")
    key = ("AWS4" + FAKE_SECRET_ACCESS_KEY).encode()
    for part in (date, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, policy.fields["policy"].encode(), hashlib.sha256).hexdigest()
    assert policy.fields["x-amz-signature"] == signature


async def test_the_uploader_never_sends_a_key_outside_its_prefix(
    s3_bucket: S3Target, tmp_path: Path
) -> None:
    policy = await _policy(s3_bucket)
    with pytest.raises(InvalidInput, match="outside the upload policy's prefix"):
        PostPolicyStore(policy, s3_bucket.key("jobs/job-2/outputs"))
    store = PostPolicyStore(policy, s3_bucket.key("jobs/job-1/outputs"))
    with pytest.raises(InvalidInput, match="outside the upload policy's prefix"):
        await store.put_bytes("../../job-2/outputs/x.txt", b"theirs")
    listed = s3_bucket.client().list_objects_v2(Bucket=s3_bucket.bucket)
    assert listed.get("KeyCount", 0) == 0
    with pytest.raises(StorageError, match="only adds objects"):
        await store.delete("metrics.json")


def test_a_value_that_is_no_policy_is_refused_naming_the_variable() -> None:
    with pytest.raises(InvalidInput, match=ENV_NAME) as refused:
        PostPolicy.from_json("s3://not-a-policy")
    assert refused.value.field == ENV_NAME
    with pytest.raises(InvalidInput, match="malformed"):
        PostPolicy.from_json('{"url": "ftp://x", "prefix": "p/", "fields": {}}')


@pytest.fixture
def refusing_store() -> Iterator[str]:
    """A loopback server that answers every POST as S3 answers a policy it does not satisfy
    (moto never refuses one, see the module's docstring)."""

    class Refuse(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            body = (
                b"<Error><Code>AccessDenied</Code><Message>Invalid according to Policy: "
                b'Policy Condition failed: ["starts-with", "$key", "p/"]</Message></Error>'
            )
            self.send_response(403)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return None

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/bucket"
    server.shutdown()
    server.server_close()


async def test_a_refused_upload_names_the_key_the_stores_reason_and_the_policy(
    refusing_store: str,
) -> None:
    policy = PostPolicy(refusing_store, "p/", {"policy": "e30="}, 1000, "2026-12-03T00:00:00Z")
    store = PostPolicyStore(policy, "p")
    with pytest.raises(StorageError) as refused:
        await store.put_bytes("metrics.json", b"{}")
    assert refused.value.message.startswith(
        "the store refused p/metrics.json (HTTP 403, AccessDenied: Invalid according to Policy"
    )
    assert refused.value.hint is not None
    assert "keys under p/, files up to 1000 bytes, until 2026-12-03T00:00:00Z" in (
        refused.value.hint
    )
