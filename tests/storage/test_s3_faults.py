"""Uploads and downloads complete and verify while the network and the store misbehave.

The fault proxy sits between j2c and the moto server and answers chosen requests with 500 or
503, resets connections, answers too late (past the read timeout) or cuts response bodies in
half. Retries with backoff must carry every transfer through, and downloads must resume.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from j2c_server.core.errors import StorageError
from j2c_server.storage import blob_key, download_uri, open_store
from j2c_server.storage.multipart import MIB
from tests.storage.fault_proxy import FaultProxy
from tests.support.s3 import S3Target

SIZE = 12 * MIB + 777  # three 5 MiB parts


def random_file(path: Path, size: int = SIZE) -> tuple[Path, str]:
    data = os.urandom(size)
    path.write_bytes(data)
    return path, hashlib.sha256(data).hexdigest()


def flaky(target: S3Target, proxy: FaultProxy) -> S3Target:
    """Reach the bucket through the proxy, with a read timeout the 'slow' fault exceeds."""
    proxy.slow_s = 3.0
    return target.via(proxy.url, read_timeout_s=2.0, max_attempts=10)


async def test_upload_completes_despite_errors_resets_and_timeouts(
    s3_bucket: S3Target, fault_proxy: FaultProxy, tmp_path: Path
) -> None:
    source, digest = random_file(tmp_path / "layer")
    key = blob_key("sha256:" + digest)
    fault_proxy.methods = frozenset({"PUT", "POST"})
    fault_proxy.queue("500", "503", "reset", "slow")
    fault_proxy.faults = ("500", "503", "reset", "slow")
    fault_proxy.rate = 0.25
    store = open_store(s3_bucket.url, flaky(s3_bucket, fault_proxy).settings)
    try:
        await store.put_file(key, source)
    finally:
        await store.close()
    assert {"500", "503", "reset", "slow"} <= set(fault_proxy.injected)
    clean = open_store(s3_bucket.url, s3_bucket.settings)
    try:
        await clean.get_file(key, tmp_path / "out", sha256=digest)
    finally:
        await clean.close()


async def test_part_altered_on_the_way_is_detected_by_its_etag_and_sent_again(
    s3_bucket: S3Target, fault_proxy: FaultProxy, tmp_path: Path
) -> None:
    source, digest = random_file(tmp_path / "layer")
    key = blob_key("sha256:" + digest)
    fault_proxy.methods = frozenset({"PUT"})
    fault_proxy.queue("corrupt", "corrupt")
    store = open_store(s3_bucket.url, s3_bucket.via(fault_proxy.url).settings)
    sent: list[int] = []
    try:
        await store.put_file(key, source, progress=sent.append)
        await store.get_file(key, tmp_path / "out", sha256=digest)
    finally:
        await store.close()
    assert fault_proxy.injected["corrupt"] == 2
    assert sum(sent) == SIZE


async def test_download_resumes_after_cut_bodies_and_errors_and_verifies(
    s3_bucket: S3Target, fault_proxy: FaultProxy, tmp_path: Path
) -> None:
    source, digest = random_file(tmp_path / "layer")
    key = blob_key("sha256:" + digest)
    clean = open_store(s3_bucket.url, s3_bucket.settings)
    try:
        await clean.put_file(key, source)
    finally:
        await clean.close()
    fault_proxy.methods = frozenset({"GET"})
    fault_proxy.queue("cut", "500", "cut", "reset", "slow", "cut")
    store = open_store(s3_bucket.url, flaky(s3_bucket, fault_proxy).settings)
    received: list[int] = []
    try:
        await store.get_file(key, tmp_path / "out", sha256=digest, progress=received.append)
    finally:
        await store.close()
    assert fault_proxy.injected["cut"] == 3
    assert sum(received) == SIZE  # resumed transfers fetch each byte once
    assert hashlib.sha256((tmp_path / "out").read_bytes()).hexdigest() == digest


async def test_presigned_download_resumes_after_cut_bodies(
    s3_bucket: S3Target, fault_proxy: FaultProxy, tmp_path: Path
) -> None:
    source, digest = random_file(tmp_path / "layer")
    key = blob_key("sha256:" + digest)
    store = open_store(s3_bucket.url, flaky(s3_bucket, fault_proxy).settings)
    try:
        await store.put_file(key, source)
        url = await store.presign(key, expires_s=600)
    finally:
        await store.close()
    assert url is not None and url.startswith(fault_proxy.url)
    fault_proxy.methods = frozenset({"GET"})
    fault_proxy.queue("cut", "503", "cut")
    received: list[int] = []
    await download_uri(
        url,
        tmp_path / "out",
        sha256=digest,
        progress=received.append,
        settings=flaky(s3_bucket, fault_proxy).settings,
    )
    assert fault_proxy.injected["cut"] == 2
    assert sum(received) == SIZE
    assert hashlib.sha256((tmp_path / "out").read_bytes()).hexdigest() == digest


async def test_a_store_that_keeps_failing_gives_up_with_a_hint(
    s3_bucket: S3Target, fault_proxy: FaultProxy, tmp_path: Path
) -> None:
    fault_proxy.faults = ("503",)
    fault_proxy.rate = 1.0
    settings = s3_bucket.via(fault_proxy.url, max_attempts=2).settings
    source, _ = random_file(tmp_path / "small", 100)
    store = open_store(s3_bucket.url, settings)
    with pytest.raises(StorageError) as caught:
        try:
            await store.put_file("jobs/j1/x", source)
        finally:
            await store.close()
    assert "kept failing (SlowDown" in caught.value.message
    assert "storage.concurrency" in (caught.value.hint or "")
    assert fault_proxy.requests == 2


def test_a_put_cut_off_mid_body_stores_nothing(
    s3_bucket: S3Target, fault_proxy: FaultProxy
) -> None:
    """A client that dies mid-request (the soak kills the server) leaves no object: a real
    store never acts on a short body. The proxy once forwarded it with its length corrected,
    and moto stored an empty manifest that jobs then refused (exit 65, the soak's bursts)."""
    import socket
    from urllib.parse import urlsplit

    from tests.support.s3 import boto3_client

    key = f"{s3_bucket.prefix}/cut-off"
    address = urlsplit(fault_proxy.url)
    with socket.create_connection((address.hostname, address.port)) as client:
        head = (
            f"PUT /{s3_bucket.bucket}/{key} HTTP/1.1\r\nHost: {address.netloc}\r\n"
            "Content-Length: 4096\r\n\r\n"
        )
        client.sendall(head.encode() + b"x" * 100)  # then gone, 3996 bytes short
    s3 = boto3_client(s3_bucket.endpoint)
    for _ in range(15):  # the proxy's thread had time to forward it, if it were to
        time.sleep(0.1)
        assert s3.list_objects_v2(Bucket=s3_bucket.bucket, Prefix=key).get("KeyCount") == 0
