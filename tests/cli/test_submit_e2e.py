"""``j2c submit`` and the job commands end to end: real subprocesses, the local scheduler, a real
project and venv in tmp_path, the shared registry in a throw-away data dir."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.frontends import J2C, RunJ2C


def submit_args(venv: Path, *extra: str) -> list[str]:
    return ["submit", "train.py", "--venv-path", str(venv), *extra]


def wait_for_status(run_j2c: RunJ2C, job_id: str, wanted: set[str], timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        result = run_j2c("status", job_id, "--json")
        record = json.loads(result.stdout)
        if record["status"] in wanted or time.monotonic() > deadline:
            return record
        time.sleep(0.3)


def test_submit_waits_and_exits_with_the_jobs_exit_code(
    run_j2c: RunJ2C, cli_project: Path, cli_venv: Path
) -> None:
    result = run_j2c(*submit_args(cli_venv, "--", "--exit", "3"), cwd=cli_project)
    assert result.returncode == 3, result.stderr
    assert "line 2" in result.stdout


def test_submit_prints_the_jobs_output_on_stdout_and_its_own_lines_on_stderr(
    run_j2c: RunJ2C, cli_project: Path, cli_venv: Path
) -> None:
    result = run_j2c(*submit_args(cli_venv), cwd=cli_project)
    assert result.returncode == 0, result.stderr
    # The local scheduler keeps one log: the job's stderr line arrives with its stdout.
    assert result.stdout.splitlines() == ["args []", "line 0", "line 1", "line 2", "oops"]
    assert "succeeded" in result.stderr.splitlines()[-1]


USER_SAYS_J2C = (
    "import sys\n"
    "print('epoch 1 loss 0.5', flush=True)\n"
    "print('j2c: running: this line is the user\\'s', flush=True)\n"
    "sys.exit(int(sys.argv[1]) if sys.argv[1:] else 0)\n"
)


def test_a_succeeded_job_shows_a_few_lines_of_j2cs_and_its_diary_with_verbose(
    run_j2c: RunJ2C, cli_project: Path, cli_venv: Path
) -> None:
    (cli_project / "train.py").write_text(USER_SAYS_J2C)
    quiet = run_j2c(*submit_args(cli_venv), cwd=cli_project)
    assert quiet.returncode == 0, quiet.stderr
    # The user's lines, the one that looks like j2c's included, as the job printed them.
    assert quiet.stdout.splitlines() == [
        "epoch 1 loss 0.5",
        "j2c: running: this line is the user's",
    ]
    said = quiet.stderr.splitlines()
    assert len(said) <= 10, said
    assert not any(line.startswith(("j2c: downloading", "j2c: extracting")) for line in said)
    job_id = said[0].split()[2]
    assert said[-1].startswith(f"j2c: job {job_id} succeeded")

    diary = run_j2c(*submit_args(cli_venv, "--new", "-v"), cwd=cli_project)
    assert diary.returncode == 0, diary.stderr
    assert diary.stdout == quiet.stdout
    said = diary.stderr.splitlines()
    assert len(said) > 15, said  # j2c's whole diary, as before
    for phase in ("manifest", "cache", "running", "summary"):  # the layers: the node cache's
        assert any(line.startswith(f"j2c: {phase}: ") for line in said), (phase, said)
    assert "j2c: scan      finished" in diary.stderr

    # `j2c logs` shows the job as submit did; -v its diary.
    logs = run_j2c("logs", job_id)
    assert logs.stdout == quiet.stdout and len(logs.stderr.splitlines()) <= 10
    assert "j2c: summary: " in run_j2c("logs", job_id, "-v").stderr


def test_a_failed_job_says_why_and_what_to_do(
    run_j2c: RunJ2C, cli_project: Path, cli_venv: Path
) -> None:
    (cli_project / "train.py").write_text(
        "print('epoch 1', flush=True)\nraise ValueError('the learning rate is negative')\n"
    )
    result = run_j2c(*submit_args(cli_venv), cwd=cli_project)
    assert result.returncode == 1
    said = result.stderr.splitlines()
    reason = "train.py raised ValueError: the learning rate is negative"
    assert said[-2].endswith(f"failed (exit code 1): {reason}"), said
    assert said[-1] == "j2c:   what to do: the traceback is in its output above this line"
    assert "Traceback (most recent call last):" in result.stdout  # the job's own, merged
    job_id = said[0].split()[2]
    # The record says it too, and `j2c logs` puts it first.
    record = json.loads(run_j2c("status", job_id, "--json").stdout)
    assert record["failure"]["reason"] == reason
    assert record["failure"]["line"] == "ValueError: the learning rate is negative"
    logs = run_j2c("logs", job_id).stderr.splitlines()
    assert logs[0] == f"j2c: job {job_id} failed (exit code 1): {reason}"


def test_arguments_after_double_dash_reach_the_script(
    run_j2c: RunJ2C, cli_project: Path, cli_venv: Path
) -> None:
    result = run_j2c(*submit_args(cli_venv, "--", "--lines", "1", "--x=y"), cwd=cli_project)
    assert "args ['--lines', '1', '--x=y']" in result.stdout


def test_piped_output_has_no_escape_codes(
    run_j2c: RunJ2C, cli_project: Path, cli_venv: Path
) -> None:
    result = run_j2c(*submit_args(cli_venv), cwd=cli_project)
    assert "\x1b" not in result.stdout + result.stderr


def test_rerunning_the_same_command_attaches_to_the_same_job(
    run_j2c: RunJ2C, cli_project: Path, cli_venv: Path
) -> None:
    first = run_j2c(*submit_args(cli_venv, "--json"), cwd=cli_project)
    second = run_j2c(*submit_args(cli_venv, "--json"), cwd=cli_project)
    assert json.loads(first.stdout)["id"] == json.loads(second.stdout)["id"]
    assert len(json.loads(run_j2c("list", "--json").stdout)) == 1


def test_new_starts_another_job(run_j2c: RunJ2C, cli_project: Path, cli_venv: Path) -> None:
    first = run_j2c(*submit_args(cli_venv, "--json"), cwd=cli_project)
    second = run_j2c(*submit_args(cli_venv, "--json", "--new"), cwd=cli_project)
    assert json.loads(first.stdout)["id"] != json.loads(second.stdout)["id"]


def test_no_wait_then_logs_follow_shows_every_line_once(
    run_j2c: RunJ2C, cli_project: Path, cli_venv: Path
) -> None:
    submitted = run_j2c(
        *submit_args(cli_venv, "--no-wait", "--", "--lines", "20", "--sleep", "0.02"),
        cwd=cli_project,
    )
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    assert f"j2c logs -f {job_id}" in submitted.stderr
    followed = run_j2c("logs", "-f", job_id)
    assert followed.returncode == 0, followed.stderr
    args_line = "args ['--lines', '20', '--sleep', '0.02']"
    expected = [args_line, *(f"line {i}" for i in range(20)), "oops"]
    assert followed.stdout.splitlines() == expected


def test_logs_after_n_resumes_after_that_event(
    run_j2c: RunJ2C, cli_project: Path, cli_venv: Path
) -> None:
    job_id = json.loads(run_j2c(*submit_args(cli_venv, "--json"), cwd=cli_project).stdout)["id"]
    events = [json.loads(line) for line in run_j2c("logs", job_id, "--json").stdout.splitlines()]
    line1 = next(e for e in events if e.get("text") == "line 1")
    resumed = run_j2c("logs", job_id, "--after", str(line1["seq"]))
    assert resumed.stdout.splitlines() == ["line 2", "oops"]


def test_cancel_stops_a_running_job(run_j2c: RunJ2C, cli_project: Path, cli_venv: Path) -> None:
    submitted = run_j2c(
        *submit_args(cli_venv, "--no-wait", "--", "--lines", "600", "--sleep", "0.1"),
        cwd=cli_project,
    )
    job_id = submitted.stdout.strip()
    assert wait_for_status(run_j2c, job_id, {"running"})["status"] == "running"
    cancelled = run_j2c("cancel", job_id[:-1])
    assert cancelled.returncode == 0, cancelled.stderr
    assert wait_for_status(run_j2c, job_id, {"cancelled", "failed"})["status"] == "cancelled"


def test_interrupt_detaches_and_the_job_still_finishes(
    cli_env: dict[str, str], cli_project: Path, cli_venv: Path, run_j2c: RunJ2C
) -> None:
    process = subprocess.Popen(
        [J2C, *submit_args(cli_venv, "--", "--lines", "30", "--sleep", "0.1")],
        cwd=cli_project,
        env=cli_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline().startswith("args")  # the job runs and we follow it
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 130
    assert "detached" in err and "j2c logs -f" in err
    (job,) = json.loads(run_j2c("list", "--json").stdout)
    final = wait_for_status(run_j2c, job["id"], {"succeeded", "failed", "lost"})
    assert final["status"] == "succeeded"


def test_status_finds_a_job_by_unique_prefix(
    run_j2c: RunJ2C, cli_project: Path, cli_venv: Path
) -> None:
    job_id = json.loads(run_j2c(*submit_args(cli_venv, "--json"), cwd=cli_project).stdout)["id"]
    result = run_j2c("status", job_id[:-2])
    assert result.returncode == 0, result.stderr
    assert job_id in result.stdout
    assert "succeeded" in result.stdout


def test_unknown_job_exits_2(run_j2c: RunJ2C) -> None:
    result = run_j2c("status", "no-such-job")
    assert result.returncode == 2
    assert "no job with id 'no-such-job'" in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_venv_exits_2_naming_the_field(run_j2c: RunJ2C, cli_project: Path) -> None:
    result = run_j2c(
        "submit", "train.py", "--venv-path", str(cli_project / "nope"), cwd=cli_project
    )
    assert result.returncode == 2
    assert "venv_path" in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_entry_point_exits_2_naming_call_path(run_j2c: RunJ2C, cli_project: Path) -> None:
    result = run_j2c("submit", "--no-venv", cwd=cli_project)
    assert result.returncode == 2
    assert "call_path" in result.stderr


def test_bad_flag_value_exits_2(run_j2c: RunJ2C, cli_project: Path) -> None:
    result = run_j2c("submit", "train.py", "--gpus", "-1", cwd=cli_project)
    assert result.returncode == 2
    assert "--gpus" in result.stderr


def test_flag_beats_environment_beats_config_file(
    run_j2c: RunJ2C, cli_project: Path, cli_venv: Path
) -> None:
    config = cli_project / "j2c.yaml"
    config.write_text(f"job:\n  call_path: train.py\n  venv_path: {cli_venv}\n  name: from-file\n")
    base = ["submit", "--config", str(config), "--no-wait", "--json"]
    env = {"J2C_JOB__NAME": "from-env"}
    names = [
        json.loads(run_j2c(*base, cwd=cli_project).stdout)["name"],
        json.loads(run_j2c(*base, cwd=cli_project, env=env).stdout)["name"],
        json.loads(run_j2c(*base, "--name", "from-flag", cwd=cli_project, env=env).stdout)["name"],
    ]
    assert names == ["from-file", "from-env", "from-flag"]


def test_json_outputs_parse(run_j2c: RunJ2C, cli_project: Path, cli_venv: Path) -> None:
    record = json.loads(run_j2c(*submit_args(cli_venv, "--json"), cwd=cli_project).stdout)
    assert record["status"] == "succeeded" and record["exit_code"] == 0
    assert json.loads(run_j2c("status", record["id"], "--json").stdout)["id"] == record["id"]
    assert [job["id"] for job in json.loads(run_j2c("list", "--json").stdout)] == [record["id"]]
    events = [
        json.loads(line) for line in run_j2c("logs", record["id"], "--json").stdout.splitlines()
    ]
    assert events[-1]["status"] == "succeeded"
    assert json.loads(run_j2c("cancel", record["id"], "--json").stdout)["status"] == "succeeded"


@pytest.mark.parametrize("scheduler", ["local", "kubernetes"])
def test_dry_run_prints_the_job_spec_and_submits_nothing(
    run_j2c: RunJ2C, cli_project: Path, cli_venv: Path, scheduler: str
) -> None:
    result = run_j2c(
        *submit_args(
            cli_venv,
            "--dry-run",
            "--scheduler",
            scheduler,
            "--image",
            "registry.example/platform:1",
            "--",
            "--x",
        ),
        cwd=cli_project,
    )
    assert result.returncode == 0, result.stderr
    spec = json.loads(result.stdout)
    text = json.dumps(spec)
    assert "--x" in text and "j2c" in text
    if scheduler == "kubernetes":
        assert spec["kind"] == "Job"
        container = spec["spec"]["template"]["spec"]["containers"][0]
        assert container["image"] == "registry.example/platform:1"
    assert json.loads(run_j2c("list", "--json").stdout) == []


def test_interrupting_logs_follow_detaches_and_says_how_to_resume(
    cli_env: dict[str, str], cli_project: Path, cli_venv: Path, run_j2c: RunJ2C
) -> None:
    submitted = run_j2c(
        *submit_args(cli_venv, "--no-wait", "--", "--lines", "100", "--sleep", "0.1"),
        cwd=cli_project,
    )
    job_id = submitted.stdout.strip()
    process = subprocess.Popen(
        [J2C, "logs", "-f", job_id], env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdout is not None
    assert process.stdout.readline().startswith(b"args")
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 130
    assert f"j2c logs -f {job_id} --after " in err.decode()
    run_j2c("cancel", job_id)
