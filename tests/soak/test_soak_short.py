"""The chaos soak's short forms (benchmarks/soak.py): sends through a real Jupyter server while
the seeded fault driver kills the server, jobs' ``j2c-unpack`` and viewers' sockets; on the S3
leg, also fails the store's requests (moto behind the fault proxy).

Whatever the timing, every invariant must hold: each job ends as its history calls for, one job
per send, every viewer sees every event once and in order across reconnects, a usage record
per job, no job's process left behind. A failure prints the violations and the seed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

SOAK = Path(__file__).resolve().parents[2] / "benchmarks" / "soak.py"


def soak(tmp_path: Path, *argv: str) -> tuple[dict[str, Any], str]:
    """Run the soak; its report (violations, faults) and its table."""
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, str(SOAK), *argv, "--report", str(report)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result: dict[str, Any] = json.loads(report.read_text())
    assert result["problems"] == []
    assert "invariant violations                                0  0" in done.stdout
    return result, done.stdout


def test_thirty_sends_under_faults_keep_every_invariant(tmp_path: Path):
    result, _ = soak(tmp_path, "--jobs", "30", "--seed", "11", "--faults-per-min", "20")
    kinds = {fault[1] for fault in result["faults"]}
    assert "server" in kinds, f"the seed drove no server kill: {result['faults']}"


def test_sends_through_a_failing_s3_store_keep_every_invariant(tmp_path: Path):
    """Bursts of 503s, 500s and resets, for the server and the jobs' j2c-unpack alike."""
    argv = ["--jobs", "12", "--seed", "11", "--faults-per-min", "30", "--store", "s3"]
    result, table = soak(tmp_path, *argv)
    kinds = {fault[1] for fault in result["faults"]}
    assert {"s3", "server"} <= kinds, f"the seed drove no S3 fault or server kill: {kinds}"
    failed = [line for line in table.splitlines() if line.startswith("S3 requests failed")]
    assert failed, table  # the proxy did fail requests, not only queue them
