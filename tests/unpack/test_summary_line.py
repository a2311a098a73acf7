"""j2c-unpack's last stderr line: one JSON summary (phases, bytes, exit code) for log pipelines.

Real jobs through the real ``j2c-unpack`` subprocess: a first run downloads every layer, a run
through a node cache that already holds them downloads nothing, and a job that fails before its
code runs still ends with the line, carrying j2c-unpack's own exit code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.unpack.conftest import SmallJob
from tests.unpack.helpers import run_unpack


def _summary(stderr: str) -> dict[str, Any]:
    last = stderr.rstrip("\n").splitlines()[-1]
    prefix, _, text = last.partition("{")
    assert prefix == "j2c: summary: "  # j2c-unpack's prefix, as on every line it writes
    summary: dict[str, Any] = json.loads("{" + text)
    assert summary["j2c_unpack"] == "summary"
    return summary


def _layer_bytes(store: Path) -> int:
    return sum(p.stat().st_size for p in (store / "blobs").rglob("*.tar.zst"))


def test_the_last_line_sums_up_a_run_that_downloaded_everything(small_job: SmallJob) -> None:
    manifest = small_job.publish()
    done = run_unpack(manifest, user_args=["7"])
    assert done.returncode == 7, done.stderr
    summary = _summary(done.stderr)
    assert summary["exit_code"] == 7
    assert summary["bytes_downloaded"] == _layer_bytes(small_job.store)
    assert summary["bytes_reused"] == 0
    assert {"manifest", "downloading", "extracting", "relocating", "running"} <= set(
        summary["phases"]
    )
    assert all(seconds >= 0 for seconds in summary["phases"].values())
    assert summary["seconds"] >= summary["phases"]["running"]


def test_a_warm_node_cache_is_counted_as_reused(small_job: SmallJob, tmp_path: Path) -> None:
    manifest = small_job.publish()
    cache = tmp_path / "node-cache"
    first = _summary(run_unpack(manifest, "--cache-dir", str(cache)).stderr)
    second_run = run_unpack(manifest, "--cache-dir", str(cache))
    assert second_run.returncode == 0, second_run.stderr
    second = _summary(second_run.stderr)
    assert first["bytes_downloaded"] == _layer_bytes(small_job.store)
    assert second["bytes_downloaded"] == 0
    assert second["bytes_reused"] == _layer_bytes(small_job.store)
    assert second["exit_code"] == 0


def test_a_failure_before_the_code_runs_still_ends_with_the_summary(tmp_path: Path) -> None:
    missing = (tmp_path / "store" / "manifests" / "sha256" / ("0" * 64 + ".json")).as_uri()
    done = run_unpack(missing)
    assert done.returncode == 66, done.stderr
    summary = _summary(done.stderr)
    assert summary["exit_code"] == 66
    assert summary["bytes_downloaded"] == 0
    assert "running" not in summary["phases"]
