"""``j2c wait``: real jobs on the local scheduler, sent with ``j2c submit --no-wait``; the command
follows them quietly and exits with their exit code, or 124 past ``--timeout``."""

from __future__ import annotations

import time
from pathlib import Path

from tests.cli.test_submit_e2e import submit_args, wait_for_status
from tests.support.frontends import RunJ2C


def send(run_j2c: RunJ2C, project: Path, venv: Path, *script_args: str) -> str:
    submitted = run_j2c(*submit_args(venv, "--no-wait", "--", *script_args), cwd=project)
    assert submitted.returncode == 0, submitted.stderr
    return submitted.stdout.strip()


def test_wait_exits_with_the_jobs_exit_code_and_prints_nothing_on_stdout(
    run_j2c: RunJ2C, cli_project: Path, cli_venv: Path
) -> None:
    job_id = send(run_j2c, cli_project, cli_venv, "--lines", "5", "--sleep", "0.1", "--exit", "3")
    result = run_j2c("wait", job_id)
    assert result.returncode == 3, result.stderr
    assert result.stdout == ""
    assert result.stderr.strip().splitlines()[-1] == f"j2c: job {job_id} failed (exit code 3)"


def test_wait_on_a_succeeded_job_by_prefix_exits_0(
    run_j2c: RunJ2C, cli_project: Path, cli_venv: Path
) -> None:
    job_id = send(run_j2c, cli_project, cli_venv)
    assert wait_for_status(run_j2c, job_id, {"succeeded", "failed", "lost"})["status"] == (
        "succeeded"
    )
    result = run_j2c("wait", job_id[:-2])  # already over: answers at once
    assert result.returncode == 0, result.stderr
    assert f"j2c: job {job_id} succeeded (exit code 0)" in result.stderr


def test_wait_past_its_timeout_exits_124_and_the_job_goes_on(
    run_j2c: RunJ2C, cli_project: Path, cli_venv: Path
) -> None:
    job_id = send(run_j2c, cli_project, cli_venv, "--lines", "40", "--sleep", "0.1")
    started = time.monotonic()
    result = run_j2c("wait", job_id, "--timeout", "1")
    assert result.returncode == 124, result.stderr
    assert time.monotonic() - started < 30
    assert f"j2c: timed out: job {job_id} is still" in result.stderr
    assert f"j2c wait {job_id}" in result.stderr
    # Let go of, not cancelled: it still ends as it would have.
    assert wait_for_status(run_j2c, job_id, {"succeeded", "failed", "lost", "cancelled"})[
        "status"
    ] == ("succeeded")


def test_wait_refuses_an_unknown_job_and_a_bad_timeout(run_j2c: RunJ2C) -> None:
    unknown = run_j2c("wait", "no-such-job")
    assert unknown.returncode == 2
    assert "no job with id 'no-such-job'" in unknown.stderr
    bad = run_j2c("wait", "x", "--timeout", "0")
    assert bad.returncode == 2
    assert "--timeout" in bad.stderr
