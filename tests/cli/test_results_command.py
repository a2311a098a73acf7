"""``j2c results JOB [--copy DIR]``: a real job on the local scheduler writes into its working
copy; the command lists what came back and copies it with its relative paths, verified against
the job's outputs index, never over another file."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tests.cli.test_submit_e2e import wait_for_status
from tests.support.frontends import RunJ2C

MODEL = bytes(range(256)) * 16
WRITES = f"""\
import os, pathlib
os.makedirs("models", exist_ok=True)
pathlib.Path("models/a.bin").write_bytes({MODEL!r})
pathlib.Path("metrics.json").write_text('{{"loss": 0.5}}')
"""


def _finished_job(run_j2c: RunJ2C, project: Path, venv: Path) -> str:
    (project / "writes.py").write_text(WRITES)
    sent = run_j2c("submit", "writes.py", "--venv-path", str(venv), "--no-wait", cwd=project)
    assert sent.returncode == 0, sent.stderr
    job_id = sent.stdout.strip()
    record = wait_for_status(run_j2c, job_id, {"succeeded", "failed", "lost"})
    assert record["status"] == "succeeded", record
    return job_id


def test_results_lists_the_outputs_and_copies_them_with_their_paths(
    run_j2c: RunJ2C, cli_project: Path, cli_venv: Path, tmp_path: Path
) -> None:
    job_id = _finished_job(run_j2c, cli_project, cli_venv)
    listed = run_j2c("results", job_id)
    assert listed.returncode == 0, listed.stderr
    sha = hashlib.sha256(MODEL).hexdigest()
    assert f"  models/a.bin  4.1 kB  sha256:{sha[:12]}" in listed.stdout.splitlines()
    assert any(line.startswith("  metrics.json  ") for line in listed.stdout.splitlines())
    as_json = json.loads(run_j2c("results", job_id, "--json").stdout)
    assert sorted(a["name"] for a in as_json["artifacts"]) == ["metrics.json", "models/a.bin"]

    target = tmp_path / "here"
    copied = run_j2c("results", job_id[:-2], "--copy", str(target))
    assert copied.returncode == 0, copied.stderr
    assert (target / "models" / "a.bin").read_bytes() == MODEL
    assert (target / "metrics.json").read_text() == '{"loss": 0.5}'
    assert f"copied  {target / 'models' / 'a.bin'}" in copied.stdout
    again = run_j2c("results", job_id, "--copy", str(target))
    assert again.returncode == 0, again.stderr
    assert f"already there  {target / 'metrics.json'}" in again.stdout


def test_results_copy_never_overwrites_and_refuses_a_tampered_output(
    run_j2c: RunJ2C, cli_project: Path, cli_venv: Path, cli_env: dict[str, str], tmp_path: Path
) -> None:
    job_id = _finished_job(run_j2c, cli_project, cli_venv)
    target = tmp_path / "here"
    target.mkdir()
    (target / "metrics.json").write_text("my own notes")
    stored = Path(cli_env["J2C_DATA_DIR"]) / "store" / "jobs" / job_id / "outputs"
    (stored / "models" / "a.bin").write_bytes(b"someone else's model")
    copied = run_j2c("results", job_id, "--copy", str(target))
    assert copied.returncode == 1
    assert "not copied: metrics.json: name: " in copied.stderr
    assert "exists with other content; not overwritten" in copied.stderr
    assert "not copied: models/a.bin: name: 'models/a.bin' is not the file the job wrote" in (
        copied.stderr
    )
    assert (target / "metrics.json").read_text() == "my own notes"
    assert not (target / "models" / "a.bin").exists()


def test_results_of_an_unknown_job_is_refused(run_j2c: RunJ2C) -> None:
    refused = run_j2c("results", "no-such-job")
    assert refused.returncode == 2
    assert "no job with id 'no-such-job'" in refused.stderr
