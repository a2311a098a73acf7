"""Every rank's outputs: ``j2c-unpack --nodes 2`` run directly as rank 0 and as rank 1 (the
backend's part, the rank's variables, set by hand), both uploading to the same job's outputs;
the results stage merges them (rank 1's under ``rank-1/``, a file identical to rank 0's listed
once) and trusts each rank's index only by that rank's own logged digest."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from pathlib import Path

from j2c_server.jobs.results import collect_outputs
from j2c_server.storage import open_store
from j2c_server.wire.api import JobRecord, JobRequest, JobResults, JobStatus
from tests.unpack.conftest import SmallJob
from tests.unpack.helpers import run_unpack

DONE_SHA = hashlib.sha256(b"done").hexdigest()


def _record() -> JobRecord:
    now = time.time()
    return JobRecord(
        id="job-1",
        name="job.py",
        key="k",
        status=JobStatus.running,
        request=JobRequest(code_path="/p", call_path="job.py"),
        scheduler="local",
        created_at=now,
        updated_at=now,
    )


def _run_rank(job: SmallJob, tmp_path: Path, outputs: Path, rank: int) -> str:
    env = {
        **os.environ,
        "J2C_NODE_RANK": str(rank),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29500",
    }
    env.pop("J2C_OUTPUT_DIR", None)
    done = run_unpack(
        job.publish(),
        "--workdir",
        str(tmp_path / f"rank{rank}"),
        "--output-uri",
        outputs.as_uri(),
        "--nodes",
        "2",
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return done.stderr


def _collected(root: Path, rank0: str, rank1: str) -> JobResults:
    async def collect() -> JobResults:
        store = open_store(root.as_uri())
        try:
            return await collect_outputs(
                store,
                _record(),
                JobResults(exit_code=0),
                uploaded=True,
                last_lines=rank0.splitlines(),
                rank_lines={1: next((x for x in rank1.splitlines() if "rank 1 sha" in x), None)},
            )
        finally:
            await store.close()

    return asyncio.run(collect())


def test_each_rank_uploads_its_own_and_identical_files_are_listed_once(
    small_job: SmallJob, tmp_path: Path
) -> None:
    root = tmp_path / "store"
    outputs = root / "jobs" / "job-1" / "outputs"
    rank0 = _run_rank(small_job, tmp_path, outputs, 0)
    rank1 = _run_rank(small_job, tmp_path, outputs, 1)
    assert "j2c: outputs: index of rank 1 sha256:" in rank1
    assert "index sha256:" not in rank1  # rank 0's search never finds rank 1's line
    index1 = json.loads((outputs / "rank-1" / ".j2c-outputs.json").read_text())
    assert index1["files"] == [{"name": "result.txt", "size": 4, "sha256": DONE_SHA}]
    results = _collected(root, rank0, rank1)
    # Both wrote result.txt alike: listed once, as rank 0's.
    assert [(a.name, a.sha256) for a in results.artifacts] == [("result.txt", DONE_SHA)]
    assert results.outputs_note == (
        "rank 0: 1 files; rank 1: 1 files under rank-1/, 1 identical to rank 0's (listed once)"
    )
    # Rank 1 wrote something else: it is listed under rank-1/ with its own digest.
    (outputs / "rank-1" / "result.txt").write_bytes(b"rank 1")
    index1["files"][0]["sha256"] = hashlib.sha256(b"rank 1").hexdigest()
    raw = json.dumps(index1).encode()
    (outputs / "rank-1" / ".j2c-outputs.json").write_bytes(raw)
    vouched = f"j2c: outputs: index of rank 1 sha256:{hashlib.sha256(raw).hexdigest()}"
    results = _collected(root, rank0, vouched)
    listed = {a.name: a.url for a in results.artifacts}
    assert sorted(listed) == ["rank-1/result.txt", "result.txt"]
    assert listed["rank-1/result.txt"] == (outputs / "rank-1" / "result.txt").as_uri()


def test_a_rank_index_its_own_log_does_not_vouch_for_is_not_listed(
    small_job: SmallJob, tmp_path: Path
) -> None:
    root = tmp_path / "store"
    outputs = root / "jobs" / "job-1" / "outputs"
    rank0 = _run_rank(small_job, tmp_path, outputs, 0)
    rank1 = _run_rank(small_job, tmp_path, outputs, 1)
    (outputs / "rank-1" / "result.txt").write_bytes(b"evil")
    index_file = outputs / "rank-1" / ".j2c-outputs.json"
    index = json.loads(index_file.read_text())
    index["files"][0]["sha256"] = hashlib.sha256(b"evil").hexdigest()
    index_file.write_text(json.dumps(index))
    results = _collected(root, rank0, rank1)
    assert [a.name for a in results.artifacts] == ["result.txt"]
    assert results.outputs_note is not None
    assert "rank 1: the outputs index" in results.outputs_note
    assert "changed in the store after the job wrote it" in results.outputs_note
    # Rank 0's digest does not vouch for rank 1's index either.
    results = _collected(root, rank0, "")
    assert "rank 1: the outputs index" in results.outputs_note
    assert "index of rank 1 sha256:" in results.outputs_note


def test_rank_0_leaves_out_its_own_files_in_another_ranks_folder(tmp_path: Path) -> None:
    from j2c_server.unpack.outputs import Caps, select
    from j2c_server.unpack.written import every_file

    (tmp_path / "rank-1").mkdir()
    (tmp_path / "rank-1" / "x.txt").write_text("x")
    (tmp_path / "rank-10.txt").write_text("y")
    chosen, left_out = select(
        every_file(tmp_path), [], Caps(10, 10), lambda _: None, reserved=("rank-1",)
    )
    assert [item.name for item in chosen] == ["rank-10.txt"]
    assert left_out == [
        {"name": "rank-1/x.txt", "size": 1, "reason": "is in another rank's outputs folder"}
    ]
