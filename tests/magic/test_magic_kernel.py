"""``%j2c`` / ``%%j2c`` in a real IPython kernel (jupyter_client), on the local scheduler, with
the registry in a throw-away data dir shared with this test process."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager, start_new_kernel

from j2c_server.config import J2CSettings
from j2c_server.wire.api import JobRecord
from tests.support.frontends import RunJ2C

CELL_TIMEOUT_S = 120


@dataclass
class CellOutput:
    stdout: str = ""
    stderr: str = ""
    displays: list[str] = field(default_factory=list)
    result: str | None = None
    error: str | None = None


@dataclass
class Kernel:
    manager: KernelManager
    client: BlockingKernelClient
    venv: Path

    def run(self, code: str) -> CellOutput:
        out = CellOutput()

        def hook(msg: dict[str, Any]) -> None:
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                if content["name"] == "stdout":
                    out.stdout += content["text"]
                else:
                    out.stderr += content["text"]
            elif kind in ("display_data", "update_display_data"):
                out.displays.append(content["data"].get("text/plain", ""))
            elif kind == "execute_result":
                out.result = content["data"].get("text/plain")
            elif kind == "error":
                out.error = f"{content['ename']}: {content['evalue']}"

        self.client.execute_interactive(code, output_hook=hook, timeout=CELL_TIMEOUT_S)
        return out

    def run_and_interrupt(self, code: str, *, after_output: str) -> str:
        """Run ``code``, interrupt the kernel once ``after_output`` was printed; what the cell
        printed after the interrupt (stdout and stderr)."""
        msg_id = self.client.execute(code)
        stdout = stderr = after = ""
        interrupted = False
        while True:
            msg = self.client.get_iopub_msg(timeout=CELL_TIMEOUT_S)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            content = msg["content"]
            if msg["msg_type"] == "stream":
                if content["name"] == "stdout":
                    stdout += content["text"]
                else:
                    stderr += content["text"]
            elif msg["msg_type"] == "status" and content["execution_state"] == "idle":
                return after
            if interrupted and msg["msg_type"] == "stream":
                after += content["text"]
            if not interrupted and after_output in stdout:
                self.manager.interrupt_kernel()
                interrupted = True


@pytest.fixture
def kernel(cli_project: Path, cli_venv: Path, cli_env: dict[str, str]) -> Iterator[Kernel]:
    manager, client = start_new_kernel(kernel_name="python3", cwd=str(cli_project), env=cli_env)
    try:
        loaded = Kernel(manager, client, cli_venv)
        assert loaded.run("%load_ext j2c_server").error is None
        yield loaded
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=False)


def registry_jobs(data_dir: str) -> list[JobRecord]:
    """The jobs a fresh service sees (as the server and the CLI would)."""
    from j2c_server.jobs.service import JobService

    async def read() -> list[JobRecord]:
        service = JobService(J2CSettings(data_dir=data_dir))
        try:
            return await service.list_jobs()
        finally:
            await service.stop()

    return asyncio.run(read())


def test_line_magic_shows_the_jobs_output_in_the_cell(kernel: Kernel) -> None:
    out = kernel.run(f"job = %j2c submit train.py --venv-path {kernel.venv} -- --lines 2")
    assert out.error is None, out.stderr
    said = [line for line in out.stdout.splitlines() if not line.startswith("j2c: job ")]
    assert said == ["args ['--lines', '2']", "line 0", "line 1", "oops"]
    assert out.stderr == ""  # a job that is fine: nothing on stderr, j2c's lines included
    assert "succeeded" in out.displays[-1]


def test_a_succeeded_job_writes_nothing_to_stderr_and_few_lines_of_j2cs(
    kernel: Kernel, cli_project: Path
) -> None:
    (cli_project / "train.py").write_text(
        "print('epoch 1', flush=True)\nprint('j2c: running: the user printed this', flush=True)\n"
    )
    out = kernel.run(f"job = %j2c submit train.py --venv-path {kernel.venv}")
    assert out.error is None and out.stderr == "", out.stderr
    # The user's "j2c:" line is the user's: printed as the job printed it, nothing else of j2c's
    # but the send's decision line.
    lines = out.stdout.splitlines()
    assert lines[1:] == ["epoch 1", "j2c: running: the user printed this"], lines
    final = out.displays[-1].splitlines()
    assert len(lines) - 2 + len(final) <= 10, (lines, final)
    assert "succeeded" in final[-1]

    diary = kernel.run(f"job = %j2c submit train.py --venv-path {kernel.venv} --new -v")
    assert diary.error is None and diary.stderr == "", diary.stderr
    said = diary.stdout.splitlines()
    assert "epoch 1" in said and "j2c: running: the user printed this" in said
    assert any(line.startswith("j2c: summary: ") for line in said)  # j2c's diary, on stdout
    assert any(line.startswith("scan ") for line in diary.displays[-1].splitlines())
    assert kernel.run("print(job.logs())").stdout.splitlines() == [
        "epoch 1",
        "j2c: running: the user printed this",
    ]


def test_a_failed_job_says_why_at_the_top_of_its_cell(kernel: Kernel, cli_project: Path) -> None:
    (cli_project / "train.py").write_text("raise KeyError('lr')\n")
    out = kernel.run(f"job = %j2c submit train.py --venv-path {kernel.venv}")
    assert out.error is None
    final = out.displays[-1].splitlines()
    assert final[0].endswith("failed (exit code 1): train.py raised KeyError: 'lr'"), final
    assert final[1] == "j2c:   what to do: the traceback is in its output above this line"


def test_line_magic_returns_a_job_handle(kernel: Kernel) -> None:
    kernel.run(f"job = %j2c submit train.py --venv-path {kernel.venv} -- --exit 4")
    out = kernel.run("print(job.status.value, job.exit_code); print(job.logs())")
    lines = out.stdout.splitlines()
    assert lines[0] == "failed 4"
    assert "args ['--exit', '4']" in lines and "line 2" in lines


def test_cell_magic_runs_the_cell_as_a_job(kernel: Kernel, cli_project: Path) -> None:
    (cli_project / ".gitignore").write_text(".j2c/\n")  # the cell file must ship regardless
    out = kernel.run(f"%%j2c --venv-path {kernel.venv}\nprint('from the cell', 6 * 7)\n")
    assert out.error is None, out.stderr
    assert "from the cell 42" in out.stdout
    assert len(list((cli_project / ".j2c" / "cells").glob("cell-*.py"))) == 1


def test_jobs_from_the_magic_are_in_the_shared_registry(
    kernel: Kernel,
    cli_env: dict[str, str],
) -> None:
    kernel.run(f"job = %j2c submit train.py --venv-path {kernel.venv}")
    job_id = kernel.run("print(job.id)").stdout.strip()
    assert [record.id for record in registry_jobs(cli_env["J2C_DATA_DIR"])] == [job_id]
    assert job_id in kernel.run("%j2c list").stdout
    assert "succeeded" in kernel.run(f"%j2c status {job_id[:-1]}").stdout


def test_no_wait_returns_at_once_and_wait_follows(kernel: Kernel) -> None:
    started = time.monotonic()
    out = kernel.run(
        f"job = %j2c submit train.py --venv-path {kernel.venv} --no-wait -- --sleep 0.5"
    )
    assert "j2c logs -f" in out.stdout or "%j2c logs -f" in out.stdout
    assert time.monotonic() - started < 10
    waited = kernel.run("record = job.wait(); print(record.status.value)")
    assert "line 2" in waited.stdout
    assert waited.stdout.rstrip().endswith("succeeded")


def test_no_wait_says_in_its_cell_how_the_job_ended(kernel: Kernel) -> None:
    """The cell returns at once with a status line; the kernel, idle, updates that line (by its
    display id, from the service's thread) when the job ends."""
    client = kernel.client
    msg_id = client.execute(
        f"job = %j2c submit train.py --venv-path {kernel.venv} --no-wait -- --sleep 0.5"
    )
    display_id = first_text = None
    while True:
        msg = client.get_iopub_msg(timeout=CELL_TIMEOUT_S)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "display_data":
            display_id = msg["content"]["transient"]["display_id"]
            first_text = msg["content"]["data"]["text/plain"]
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
    assert display_id is not None and first_text is not None
    job_id = kernel.run("print(job.id)").stdout.strip()
    assert first_text.startswith(f"j2c: job {job_id} (")
    assert first_text.endswith("; this line says how it ends")

    deadline = time.monotonic() + CELL_TIMEOUT_S
    while True:
        msg = client.get_iopub_msg(timeout=max(1.0, deadline - time.monotonic()))
        if msg["msg_type"] == "update_display_data":
            assert msg["content"]["transient"]["display_id"] == display_id
            text = msg["content"]["data"]["text/plain"]
            break
    assert re.fullmatch(
        rf"j2c: job {job_id} \(\S+\) succeeded \(exit code 0\) in \d+(\.\d)? s", text
    ), text
    assert kernel.run("print(job.status.value)").stdout.strip() == "succeeded"


def test_bad_option_is_a_short_usage_error(kernel: Kernel) -> None:
    out = kernel.run("%j2c submit --gpus many")
    assert out.stderr.startswith("UsageError: ") and "--gpus" in out.stderr
    assert "Traceback" not in out.stderr


def test_unknown_job_is_a_short_usage_error(kernel: Kernel) -> None:
    out = kernel.run("%j2c status nope")
    assert out.stderr.startswith("UsageError: ") and "no job with id 'nope'" in out.stderr
    assert "Traceback" not in out.stderr


def test_line_magic_without_entry_runs_this_notebook_once(
    cli_project: Path, notebook_venv: Path, cli_env: dict[str, str]
) -> None:
    import nbformat

    notebook = cli_project / "analysis.ipynb"
    cells = [
        nbformat.v4.new_code_cell("print('from the notebook', 6 * 7)"),
        nbformat.v4.new_code_cell("%load_ext j2c_server\n%j2c submit"),
    ]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), notebook)
    env = {**cli_env, "JPY_SESSION_NAME": str(notebook)}
    manager, client = start_new_kernel(kernel_name="python3", cwd=str(cli_project), env=env)
    try:
        kernel = Kernel(manager, client, notebook_venv)
        kernel.run("%load_ext j2c_server")
        out = kernel.run(f"job = %j2c submit --venv-path {notebook_venv}")
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=False)
    assert "from the notebook 42" in out.stdout, out.stderr
    assert "not submitting again" in out.stdout + out.stderr
    assert any("succeeded" in display for display in out.displays)


def test_interrupt_detaches_and_the_job_goes_on(kernel: Kernel) -> None:
    said = kernel.run_and_interrupt(
        f"job = %j2c submit train.py --venv-path {kernel.venv} -- --lines 20 --sleep 0.1",
        after_output="line 0",
    )
    assert "detached" in said and "keeps running" in said
    waited = kernel.run("print(job.wait(quiet=True).status.value)")
    assert waited.stdout.strip() == "succeeded"


def test_a_job_running_when_the_kernel_exits_is_watched_to_its_end(
    cli_project: Path, cli_venv: Path, cli_env: dict[str, str]
) -> None:
    manager, client = start_new_kernel(kernel_name="python3", cwd=str(cli_project), env=cli_env)
    try:
        kernel = Kernel(manager, client, cli_venv)
        kernel.run("%load_ext j2c_server")
        kernel.run(
            f"job = %j2c submit train.py --venv-path {cli_venv} --no-wait -- --lines 30 --sleep 0.1"
        )
        # Running: the kernel drives it (follows its logs) when it is shut down.
        kernel.run("import time\nwhile job.status.value != 'running': time.sleep(0.1)")
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=False)
    deadline = time.monotonic() + 60
    while True:
        (record,) = registry_jobs(cli_env["J2C_DATA_DIR"])
        if record.status.terminal or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert record.status.value == "succeeded"


def test_seed_form_from_another_folder_ships_the_code_paths_entry_point(
    kernel: Kernel, cli_project: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    kernel.run(f"import os; os.chdir({str(elsewhere)!r})")
    out = kernel.run(
        f"job = %j2c submit --code-path {cli_project} --call-path train.py "
        f"--venv-path {kernel.venv} -- --lines 1"
    )
    assert out.error is None, (out.error, out.stderr)
    said = [line for line in out.stdout.splitlines() if not line.startswith("j2c: job ")]
    assert said == ["args ['--lines', '1']", "line 0", "oops"]


def test_the_magic_prints_what_the_cli_prints(
    kernel: Kernel, run_j2c: RunJ2C, cli_project: Path
) -> None:
    """One command layer: ``%j2c list``/``status`` and ``logs --json`` print what ``j2c ...``
    prints, on the same streams; ``%j2c logs`` the job's lines as ``j2c logs`` does, j2c's own
    in the cell's display (as a followed job's), never on stderr for a job that is fine."""
    kernel.run(f"job = %j2c submit train.py --venv-path {kernel.venv} -- --lines 2")
    job_id = kernel.run("print(job.id)").stdout.strip()
    for args in (
        ["logs", job_id, "--json"],
        ["list", "--json"],
        ["list"],
        ["status", job_id],
        ["status", job_id, "--json"],
    ):
        cell = kernel.run("%j2c " + " ".join(args))
        cli = run_j2c(*args, cwd=cli_project)
        assert cli.returncode == 0, cli.stderr
        assert cell.error is None, cell.stderr
        assert (cell.stdout, cell.stderr) == (cli.stdout, cli.stderr), args
    for args in (["logs", job_id], ["logs", job_id, "--after", "3"]):
        cell = kernel.run("%j2c " + " ".join(args))
        cli = run_j2c(*args, cwd=cli_project)
        assert (cell.stdout, cell.stderr) == (cli.stdout, ""), args
        assert f"j2c: job {job_id} succeeded: exit code 0" in cli.stderr.splitlines()[-1]
        assert cell.displays[-1].splitlines()[-1] == cli.stderr.splitlines()[-1]
