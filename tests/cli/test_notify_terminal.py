"""``j2c submit --no-wait --notify``: the command returns at once, and the detached watcher it
leaves prints one line on the terminal it was started from when the job ends.

The terminal is a real pseudo-terminal: the ``j2c`` process runs in a session of its own with
the pty's slave as its controlling terminal, and the test reads the master side, past the
command's exit (the watcher, in its own session, still holds the terminal it inherited).
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import subprocess
import termios
import time
from pathlib import Path

from tests.cli.test_submit_e2e import submit_args, wait_for_status
from tests.support.frontends import J2C, RunJ2C

TIMEOUT_S = 90.0


def _take_terminal() -> None:
    # In the child, after setsid (start_new_session): the pty on stdin becomes its terminal.
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def _start_on_pty(
    args: list[str], cwd: Path, env: dict[str, str]
) -> tuple[subprocess.Popen[bytes], int]:
    master, slave = os.openpty()
    process = subprocess.Popen(
        [J2C, *args],
        cwd=cwd,
        env=env,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
        preexec_fn=_take_terminal,
    )
    os.close(slave)
    return process, master


def _read_until(master: int, pattern: re.Pattern[str], seen: str = "") -> str:
    """What the terminal showed, up to a match of ``pattern`` (or the timeout: an error)."""
    deadline = time.monotonic() + TIMEOUT_S
    while not pattern.search(seen):
        left = deadline - time.monotonic()
        assert left > 0, f"the terminal never showed {pattern.pattern!r}: {seen!r}"
        ready, _, _ = select.select([master], [], [], min(left, 1.0))
        if ready:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: every holder of the slave side closed it
                chunk = b""
            assert chunk, f"the terminal closed before {pattern.pattern!r}: {seen!r}"
            seen += chunk.decode(errors="replace")
    return seen


def test_the_watcher_tells_the_terminal_how_the_job_ended(
    cli_project: Path, cli_venv: Path, cli_env: dict[str, str]
) -> None:
    args = submit_args(cli_venv, "--no-wait", "--notify", "--", "--sleep", "0.5")
    process, master = _start_on_pty(args, cli_project, cli_env)
    try:
        shown = _read_until(master, re.compile(r"this terminal gets a line when job (\S+) ends"))
        assert process.wait(timeout=TIMEOUT_S) == 0  # returned at once: the job goes on
        job_id = re.search(r"when job (\S+) ends", shown).group(1)  # type: ignore[union-attr]
        ended = re.compile(
            rf"j2c: job {job_id} \(\S+\) succeeded \(exit code 0\) in \d+(\.\d)? s\r+\n"
        )
        shown = _read_until(master, ended, shown)
        # The line stands on its own line, and nothing of the job's output reaches the terminal.
        assert "line 0" not in shown
    finally:
        os.close(master)


def test_a_terminal_closed_before_the_end_is_no_failure(
    cli_project: Path, cli_venv: Path, cli_env: dict[str, str], run_j2c: RunJ2C
) -> None:
    args = submit_args(cli_venv, "--no-wait", "--notify", "--", "--sleep", "2")
    process, master = _start_on_pty(args, cli_project, cli_env)
    shown = _read_until(master, re.compile(r"this terminal gets a line when job (\S+) ends"))
    job_id = re.search(r"when job (\S+) ends", shown).group(1)  # type: ignore[union-attr]
    assert process.wait(timeout=TIMEOUT_S) == 0
    os.close(master)  # the user closed the terminal window

    assert wait_for_status(run_j2c, job_id, {"succeeded", "failed", "lost"})["status"] == (
        "succeeded"
    )
    log = Path(cli_env["J2C_DATA_DIR"]) / "watchers" / f"{job_id}.log"
    deadline = time.monotonic() + TIMEOUT_S
    while "its terminal is closed" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, log.read_text() if log.exists() else "no log"
        time.sleep(0.1)


def test_without_a_terminal_it_says_so_and_submits_all_the_same(
    cli_project: Path, cli_venv: Path, cli_env: dict[str, str], run_j2c: RunJ2C
) -> None:
    # A session of its own and no tty on any stream: as from cron or CI.
    result = subprocess.run(
        [J2C, *submit_args(cli_venv, "--no-wait", "--notify")],
        cwd=cli_project,
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr
    assert "j2c: --notify: no terminal to notify" in result.stderr
    job_id = result.stdout.strip()
    assert run_j2c("wait", job_id).returncode == 0
