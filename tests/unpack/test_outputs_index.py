"""The outputs index ``j2c-unpack`` writes next to the outputs, and what the server's results
stage makes of it when an upload failed: which outputs, and why.

Real ``j2c-unpack`` runs (``tests/unpack/helpers.run_unpack``) into a ``file://`` store; the
results stage's reader (``j2c_server.jobs.results.collect_outputs``) then reads that store.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from pathlib import Path

from j2c_server.jobs.results import collect_outputs
from j2c_server.storage import open_store
from j2c_server.unpack.errors import ExitCode
from j2c_server.wire.api import JobRecord, JobRequest, JobResults, JobStatus
from tests.unpack.conftest import SmallJob
from tests.unpack.helpers import run_unpack


def _record() -> JobRecord:
    now = time.time()
    return JobRecord(
        id="job-1",
        name="job.py",
        key="k",
        status=JobStatus.running,
        request=JobRequest(code_path="/p", call_path="job.py"),
        scheduler="slurm",
        created_at=now,
        updated_at=now,
    )


async def _collected(store_root: Path, stderr: str) -> JobResults:
    store = open_store(store_root.as_uri())
    try:
        return await collect_outputs(
            store,
            _record(),
            JobResults(exit_code=0),
            uploaded=True,
            last_lines=stderr.splitlines(),
        )
    finally:
        await store.close()


def test_the_index_lists_each_uploaded_file_with_size_and_sha256(
    small_job: SmallJob, tmp_path: Path
):
    root = tmp_path / "store-out"
    outputs = root / "jobs" / "job-1" / "outputs"
    done = run_unpack(
        small_job.publish(), "--workdir", str(tmp_path / "job"), "--output-uri", outputs.as_uri()
    )
    assert done.returncode == 0, done.stderr
    index = json.loads((outputs / ".j2c-outputs.json").read_text())
    sha = hashlib.sha256(b"done").hexdigest()
    assert index["files"] == [{"name": "result.txt", "size": 4, "sha256": sha}]
    assert index["failed"] == []
    results = asyncio.run(_collected(root, done.stderr))
    assert [(a.name, a.sha256) for a in results.artifacts] == [("result.txt", sha)]
    assert results.artifacts[0].url == (outputs / "result.txt").as_uri()
    assert results.outputs_note is None


def test_one_output_that_cannot_be_uploaded_is_named_with_the_reason(
    small_job: SmallJob, tmp_path: Path
):
    root = tmp_path / "store-out"
    outputs = root / "jobs" / "job-1" / "outputs"
    (outputs / "result.txt").mkdir(parents=True)  # a folder where the file should land
    done = run_unpack(
        small_job.publish(), "--workdir", str(tmp_path / "job"), "--output-uri", outputs.as_uri()
    )
    assert done.returncode == ExitCode.OUTPUTS
    assert "1 of 1 outputs not uploaded" in done.stderr
    index = json.loads((outputs / ".j2c-outputs.json").read_text())
    assert [item["name"] for item in index["failed"]] == ["result.txt"]
    assert index["failed"][0]["error"]
    results = asyncio.run(_collected(root, done.stderr))
    assert results.artifacts == []
    assert [failure.name for failure in results.failed_outputs] == ["result.txt"]
    assert results.outputs_note is not None
    assert results.outputs_note.startswith("1 output(s) not uploaded: result.txt: ")


def test_a_store_that_takes_nothing_is_reported_from_the_log(small_job: SmallJob, tmp_path: Path):
    root = tmp_path / "store-out"
    (root / "jobs" / "job-1").mkdir(parents=True)
    (root / "jobs" / "job-1" / "outputs").write_text("a file where the outputs folder should be")
    done = run_unpack(
        small_job.publish(),
        "--workdir",
        str(tmp_path / "job"),
        "--output-uri",
        (root / "jobs" / "job-1" / "outputs").as_uri(),
    )
    assert done.returncode == ExitCode.OUTPUTS
    results = asyncio.run(_collected(root, done.stderr))
    assert results.outputs_note is not None
    assert results.outputs_note.startswith("outputs not uploaded: j2c: uploading outputs: ")
    assert "failed" in results.outputs_note


def test_an_index_changed_in_the_store_after_the_job_is_not_listed(
    small_job: SmallJob, tmp_path: Path
):
    root = tmp_path / "store-out"
    outputs = root / "jobs" / "job-1" / "outputs"
    done = run_unpack(
        small_job.publish(), "--workdir", str(tmp_path / "job"), "--output-uri", outputs.as_uri()
    )
    assert done.returncode == 0, done.stderr
    # Someone with write access to the bucket swaps a file and the index to match it.
    (outputs / "result.txt").write_text("evil")
    index_file = outputs / ".j2c-outputs.json"
    index = json.loads(index_file.read_text())
    index["files"][0]["sha256"] = hashlib.sha256(b"evil").hexdigest()
    index_file.write_text(json.dumps(index))
    results = asyncio.run(_collected(root, done.stderr))
    assert results.artifacts == []
    assert results.outputs_note is not None
    assert "is not listed: its sha256 " in results.outputs_note
    assert "changed in the store after the job wrote it" in results.outputs_note


def test_an_index_the_log_does_not_vouch_for_is_not_listed(small_job: SmallJob, tmp_path: Path):
    root = tmp_path / "store-out"
    outputs = root / "jobs" / "job-1" / "outputs"
    done = run_unpack(
        small_job.publish(), "--workdir", str(tmp_path / "job"), "--output-uri", outputs.as_uri()
    )
    assert done.returncode == 0, done.stderr
    unsigned = "\n".join(line for line in done.stderr.splitlines() if "index sha256:" not in line)
    results = asyncio.run(_collected(root, unsigned))
    assert results.artifacts == []
    assert results.outputs_note is not None
    assert "the job's log does not hold its sha256" in results.outputs_note


def test_an_index_of_a_job_stopped_before_its_final_upload_says_so(tmp_path: Path):
    outputs = tmp_path / "store-out" / "jobs" / "job-1" / "outputs"
    outputs.mkdir(parents=True)
    (outputs / "ckpt.bin").write_bytes(b"step 1")
    index = {
        "format": 2,
        "final": False,
        "files": [{"name": "ckpt.bin", "size": 6, "sha256": hashlib.sha256(b"step 1").hexdigest()}],
        "failed": [],
        "left_out": [{"name": "huge.pt", "size": 9_000_000_000, "reason": "9.0 GB over it"}],
    }
    raw = json.dumps(index).encode()
    (outputs / ".j2c-outputs.json").write_bytes(raw)
    line = f"j2c: outputs: index sha256:{hashlib.sha256(raw).hexdigest()}"
    results = asyncio.run(_collected(tmp_path / "store-out", line))
    assert [a.name for a in results.artifacts] == ["ckpt.bin"]
    assert [(item.name, item.error) for item in results.left_out_outputs] == [
        ("huge.pt", "9.0 GB over it")
    ]
    assert results.outputs_note is not None
    assert "left out: huge.pt 9.0 GB over it" in results.outputs_note
    assert "stopped before its last outputs upload ended" in results.outputs_note
