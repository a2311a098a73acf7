"""An upload killed mid-way resumes on the next run: it sends only what the server lacks."""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path

from j2c_server.storage import blob_key, open_store
from j2c_server.storage.multipart import MIB
from tests.storage.fault_proxy import FaultProxy
from tests.support.s3 import S3Target

WORKER = Path(__file__).with_name("upload_worker.py")
SIZE = 20 * MIB + 4321  # five 5 MiB parts


def test_killed_upload_resumes_sending_fewer_bytes_and_the_blob_verifies(
    s3_bucket: S3Target, fault_proxy: FaultProxy, tmp_path: Path
) -> None:
    data = os.urandom(SIZE)
    source = tmp_path / "layer.tar.zst"
    source.write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    key = blob_key("sha256:" + digest)
    # One part at a time through the counting proxy, so "two parts done" is a clear moment.
    target = s3_bucket.via(fault_proxy.url, concurrency=1)
    settings_json = target.settings.model_dump_json()

    worker = subprocess.Popen(
        [sys.executable, str(WORKER), target.url, settings_json, key, str(source)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert worker.stdout is not None
    finished_parts = 0
    while finished_parts < 2:
        line = worker.stdout.readline()
        assert line.startswith("part "), f"worker ended early: {line!r}"
        finished_parts += 1
    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=30)
    first_run_bytes = fault_proxy.bytes_up
    assert first_run_bytes < SIZE
    assert s3_bucket.client().list_multipart_uploads(Bucket=s3_bucket.bucket)["Uploads"]

    fault_proxy.reset_counters()
    sent: list[int] = []

    async def upload_again_then_download() -> None:
        store = open_store(target.url, target.settings)
        try:
            await store.put_file(key, source, progress=sent.append)
            await store.get_file(key, tmp_path / "check", sha256=digest)
        finally:
            await store.close()

    asyncio.run(upload_again_then_download())
    assert sum(sent) <= SIZE - 2 * 5 * MIB  # the two finished parts were not sent again
    # On the wire too: the parts sent plus a little XML (the completion request).
    assert sum(sent) <= fault_proxy.bytes_up < sum(sent) + 64 * 1024
    assert (tmp_path / "check").read_bytes() == data
    assert s3_bucket.client().list_multipart_uploads(Bucket=s3_bucket.bucket).get("Uploads") in (
        None,
        [],
    )
