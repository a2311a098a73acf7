"""Every job is pinned to its manifest's digest (``--manifest-digest``).

Another tenant who can write a shared store can replace a queued job's per-job manifest
(``jobs/<id>/manifest.json``, not content-addressed) with one whose layers they control, their
digests consistent. The job must refuse it before fetching any layer: through the real
``j2c-unpack`` subprocess, with a ``file://`` store and a real moto S3 store, and an attacker
layer served by an HTTP server that records every request.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import http.server
import json
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from j2c_server.pack import PackSpec, make_manifest, pack, publish
from j2c_server.storage import open_store
from tests.support.s3 import S3Target
from tests.unpack.conftest import SmallJob
from tests.unpack.helpers import Entry, run_unpack, write_layer
from tests.unpack.test_stores_and_outputs import s3_environment

RAN = "USER CODE RAN"
EVIL_PY = "print('ATTACKER CODE RAN')\n"


class Recorder:
    """An HTTP server of one folder that records the path of every request it gets."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.paths: list[str] = []
        recorded = self.paths

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args: object, **kwargs: object) -> None:
                super().__init__(*args, directory=str(folder), **kwargs)  # type: ignore[arg-type]

            def send_head(self):  # type: ignore[no-untyped-def]
                recorded.append(self.path)
                return super().send_head()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def attacker(tmp_path: Path) -> Iterator[Recorder]:
    folder = tmp_path / "attacker"
    write_layer(folder / "evil.tar.zst", [Entry("job.py", data=EVIL_PY.encode())])
    recorder = Recorder(folder)
    yield recorder
    recorder.close()


class ReadWatch:
    """A FIFO at ``path`` that tells whether anyone opened it for reading (a layer blob that
    must not be read): a reader's ``open`` is what lets the writer's non-blocking open succeed."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(path)
        self.path = path
        self.opened = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(0.005):
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # no reader yet
                    continue
                raise
            self.opened.set()
            os.close(fd)  # the reader gets EOF: a short blob, never a hang
            return

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def tampered(genuine: bytes, attacker: Recorder, *, url: bool = True) -> bytes:
    """The genuine manifest with its code layer swapped for the attacker's (digest and size
    consistent; served from the attacker's server, or with ``url=False`` from the store), and
    an env of theirs."""
    data = json.loads(genuine)
    evil = (attacker.folder / "evil.tar.zst").read_bytes()
    for layer in data["layers"]:
        if layer["role"] == "code":
            layer.update(digest=pin(evil), size=len(evil))
            if url:
                layer["url"] = f"{attacker.base}/evil.tar.zst"
    data["env"] = {"ATTACKER": "1"}
    return json.dumps(data).encode()


def evil_digest(attacker: Recorder) -> str:
    return pin((attacker.folder / "evil.tar.zst").read_bytes())


def pin(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def assert_refused_before_any_layer(
    done: subprocess.CompletedProcess[str], genuine: bytes, swapped: bytes
) -> None:
    assert done.returncode == 65, done.stderr
    assert f"is {pin(swapped)}, not the {pin(genuine)} this job was given" in done.stderr
    assert "j2c: downloading" not in done.stderr and "j2c: verifying" not in done.stderr
    assert "ATTACKER" not in done.stdout and RAN not in done.stdout


def test_a_tampered_job_manifest_in_a_file_store_is_refused_before_any_layer(
    small_job: SmallJob, attacker: Recorder, tmp_path: Path
) -> None:
    genuine = Path(small_job.publish().removeprefix("file://")).read_bytes()
    job_manifest = small_job.store / "jobs" / "job-1" / "manifest.json"
    job_manifest.parent.mkdir(parents=True)
    job_manifest.write_bytes(genuine)
    uri = job_manifest.as_uri()
    ok = run_unpack(uri, "--manifest-digest", pin(genuine), "--workdir", str(tmp_path / "ok"))
    assert ok.returncode == 0 and RAN in ok.stdout, ok.stderr  # pinned: the genuine one runs
    assert "not pinned" not in ok.stderr

    # Swapped for one whose layers come from the attacker's server...
    swapped = tampered(genuine, attacker)
    job_manifest.write_bytes(swapped)
    done = run_unpack(uri, "--manifest-digest", pin(genuine), "--workdir", str(tmp_path / "a"))
    assert_refused_before_any_layer(done, genuine, swapped)
    assert attacker.paths == []

    # ... or from the store itself (no url): that blob is not even opened.
    swapped = tampered(genuine, attacker, url=False)
    job_manifest.write_bytes(swapped)
    blobs = small_job.store / "blobs" / "sha256"
    watch = ReadWatch(blobs / f"{evil_digest(attacker).removeprefix('sha256:')}.tar.zst")
    try:
        done = run_unpack(uri, "--manifest-digest", pin(genuine), "--workdir", str(tmp_path / "b"))
    finally:
        watch.close()
    assert_refused_before_any_layer(done, genuine, swapped)
    assert not watch.opened.is_set()


def test_a_tampered_job_manifest_in_s3_is_refused_before_any_layer(
    small_job: SmallJob, attacker: Recorder, s3_bucket: S3Target, tmp_path: Path
) -> None:
    result = pack(
        PackSpec(code_path=small_job.project, call_path="job.py", venv_path=small_job.venv),
        tmp_path / "cache",
    )
    manifest = make_manifest(result)

    async def published() -> None:
        store = open_store(s3_bucket.url, s3_bucket.settings)
        try:
            await publish(store, result, manifest)
        finally:
            await store.close()

    asyncio.run(published())
    genuine = manifest.canonical_json()
    client, key = s3_bucket.client(), s3_bucket.key("jobs/job-1/manifest.json")
    uri = f"{s3_bucket.url}/jobs/job-1/manifest.json"
    env = s3_environment(s3_bucket)

    client.put_object(Bucket=s3_bucket.bucket, Key=key, Body=genuine)
    ok = run_unpack(
        uri, "--manifest-digest", pin(genuine), "--workdir", str(tmp_path / "ok"), env=env
    )
    assert ok.returncode == 0 and RAN in ok.stdout, ok.stderr

    swapped = tampered(genuine, attacker)
    client.put_object(Bucket=s3_bucket.bucket, Key=key, Body=swapped)
    # Had any layer been fetched from the store, this missing venv blob would be exit 66.
    venv = next(layer for layer in manifest.layers if layer.role.value == "venv")
    client.delete_object(
        Bucket=s3_bucket.bucket, Key=s3_bucket.key(f"blobs/sha256/{venv.digest[7:]}.tar.zst")
    )
    done = run_unpack(
        uri, "--manifest-digest", pin(genuine), "--workdir", str(tmp_path / "a"), env=env
    )
    assert_refused_before_any_layer(done, genuine, swapped)
    assert attacker.paths == []


def test_a_pin_overrides_a_content_addressed_name(small_job: SmallJob, tmp_path: Path) -> None:
    """The bytes match their name, but they are not the manifest this job was given."""
    uri = small_job.publish()
    other = pin(b"another manifest")
    done = run_unpack(uri, "--manifest-digest", other, "--workdir", str(tmp_path / "job"))
    assert done.returncode == 65, done.stderr
    assert f"not the {other} this job was given (--manifest-digest)" in done.stderr


def test_an_unpinned_job_manifest_runs_with_a_warning(small_job: SmallJob, tmp_path: Path) -> None:
    """A hand-run ``j2c-unpack`` of a manifest outside ``manifests/sha256/``: said, not refused."""
    genuine = Path(small_job.publish().removeprefix("file://")).read_bytes()
    job_manifest = small_job.store / "jobs" / "job-1" / "manifest.json"
    job_manifest.parent.mkdir(parents=True)
    job_manifest.write_bytes(genuine)
    done = run_unpack(job_manifest.as_uri(), "--workdir", str(tmp_path / "job"))
    assert done.returncode == 0 and RAN in done.stdout, done.stderr
    assert (
        f"j2c: manifest: not pinned: {job_manifest.as_uri()} is not content-addressed"
        in done.stderr
    )
    assert pin(genuine) in done.stderr

    content_addressed = run_unpack(small_job.publish(), "--workdir", str(tmp_path / "ca"))
    assert content_addressed.returncode == 0
    assert "not pinned" not in content_addressed.stderr  # its name is its digest: checked


@pytest.mark.parametrize(
    "digest",
    ["abc", "sha256:" + "A" * 64, "sha256:" + "0" * 63, "md5:" + "0" * 64, "sha256:" + "g" * 64],
)
def test_a_malformed_manifest_digest_is_a_usage_error(small_job: SmallJob, digest: str) -> None:
    done = run_unpack(small_job.publish(), "--manifest-digest", digest)
    assert done.returncode == 2
    assert f"{digest!r} is not sha256:<64 lowercase hex digits>" in done.stderr
