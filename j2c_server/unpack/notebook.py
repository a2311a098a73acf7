"""Executes one notebook cell by cell in a kernel of the venv: j2c-unpack's notebook entry.

Run as a script by the venv's interpreter, never imported by j2c-unpack:
``python -I notebook.py NOTEBOOK SAVE_AS [ARGS...]``. It imports only the standard library and
nbclient (with its Jupyter dependencies) from the venv, nothing of j2c.

- The kernel is this interpreter (``python -m ipykernel_launcher``), through a kernel spec made
  here, so an image's own ``python3`` kernel spec can never run the notebook outside the venv.
- ``sys.argv`` in the kernel is ``[NOTEBOOK, *ARGS]``, so argparse in a notebook works as in a
  script.
- Cell outputs are written to stdout/stderr as the kernel sends them (not at the end).
- The executed notebook is saved to SAVE_AS, also when a cell fails or the job is stopped.
- SIGTERM/SIGINT interrupt the running cell (KeyboardInterrupt in the user's code, as in
  JupyterLab) and stop before the next one; the exit code is then 128+N. A failing cell gives 1
  (its exception named in an error line); nbclient or ipykernel missing from the venv gives 71
  (j2c-unpack's code for "entry not runnable"), with a hint line that says what to install.
- Its own lines are j2c's, tagged as j2c-unpack's are (``$J2C_LINE_TAG``, taken out of the
  environment before the kernel starts).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

NBCLIENT_MISSING = 71
KERNEL_NAME = "j2c-venv"
# What the runner imports from the venv (or the image under it): the lab's preflight checks
# for the same two (image/job_needs.py).
RUNNER_NEEDS = ("nbclient", "ipykernel")
TAG_ENV = "J2C_LINE_TAG"
_TAG_RE = re.compile(r"[0-9a-f]{12}")
_tag: list[str | None] = [None]


class Stopped(Exception):
    """A stop signal arrived: no further cell runs."""


def main(argv: list[str]) -> int:
    _take_tag()  # before the kernel starts: it inherits this process's environment
    notebook, save_as, args = Path(argv[0]), Path(argv[1]), argv[2:]
    missing = [name for name in RUNNER_NEEDS if importlib.util.find_spec(name) is None]
    if missing:
        _say(
            f"cannot run {notebook.name}: the notebook runner needs nbclient and ipykernel; "
            f"the venv (and the Python under it) lacks {' and '.join(missing)}",
            "error",
        )
        _hint("install nbclient and ipykernel into the venv (or the image) and send again")
        return NBCLIENT_MISSING
    try:
        import nbformat
        from jupyter_client.kernelspec import KernelSpecManager
        from jupyter_client.manager import AsyncKernelManager
        from jupyter_core.utils import ensure_async
        from nbclient import NotebookClient
        from nbclient.exceptions import CellExecutionError, DeadKernelError
        from nbformat import NotebookNode
    except ImportError as exc:
        _say(f"cannot run {notebook.name}: nbclient does not import ({exc})", "error")
        _hint("install nbclient and ipykernel into the venv (or the image) and send again")
        return NBCLIENT_MISSING

    class StreamingClient(NotebookClient):
        """Echoes outputs as they arrive; turns a stop signal into a kernel interrupt."""

        stopped_by: int | None = None
        interrupting: asyncio.Future[None] | None = None

        def output(self, outs: Any, msg: Any, display_id: Any, cell_index: int) -> Any:
            _echo(msg)
            return super().output(outs, msg, display_id, cell_index)

        async def async_start_new_kernel_client(self) -> Any:
            client = await super().async_start_new_kernel_client()
            # Replaces nbclient's own handlers, which would shut the kernel down mid-cell.
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, self.stop, signum)
            return client

        def stop(self, signum: int) -> None:
            _say(f"{signal.Signals(signum).name}: interrupting the running cell")
            self.stopped_by = signum
            if self.km is not None:
                self.interrupting = asyncio.ensure_future(ensure_async(self.km.interrupt_kernel()))

        async def async_execute_cell(
            self,
            cell: NotebookNode,
            cell_index: int,
            execution_count: int | None = None,
            store_history: bool = True,
        ) -> NotebookNode:
            if self.stopped_by is not None:
                raise Stopped()
            if cell.cell_type == "code":
                _say(f"cell {cell_index + 1} of {len(self.nb.cells)}")
            return await super().async_execute_cell(
                cell, cell_index, execution_count=execution_count, store_history=store_history
            )

    nb = nbformat.read(notebook, as_version=4)  # type: ignore[no-untyped-call]
    with tempfile.TemporaryDirectory(prefix="j2c-kernel-") as specs:
        _write_kernel_spec(Path(specs) / KERNEL_NAME)
        manager = AsyncKernelManager(
            kernel_name=KERNEL_NAME,
            kernel_spec_manager=KernelSpecManager(kernel_dirs=[specs]),
            # Unix sockets in a private folder: no TCP port on a shared node reaches the kernel.
            transport="ipc",
            ip=str(Path(specs) / "kernel"),
        )
        argv_line = f"import sys; sys.argv[:] = {[str(notebook), *args]!r}"
        client = StreamingClient(
            nb,
            km=manager,
            resources={"metadata": {"path": str(Path.cwd())}},
            extra_arguments=[f"--IPKernelApp.exec_lines={argv_line}"],
        )
        try:
            client.execute(cleanup_kc=True)
            code = 0
        except (CellExecutionError, DeadKernelError, Stopped) as exc:
            stopped = client.stopped_by
            if stopped is None:
                _say(_failure(notebook.name, exc), "error")
            code = 1 if stopped is None else 128 + stopped
        finally:
            save_as.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, save_as)  # type: ignore[no-untyped-call]
            _say(f"executed notebook saved to {save_as}")
    return code


def _write_kernel_spec(folder: Path) -> None:
    folder.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python (j2c venv)",
        "language": "python",
    }
    (folder / "kernel.json").write_text(json.dumps(spec))


def _echo(msg: dict[str, Any]) -> None:
    """Write one output message of the kernel to our stdout/stderr as plain text."""
    kind, content = msg["msg_type"], msg["content"]
    if kind == "stream":
        stream = sys.stderr if content.get("name") == "stderr" else sys.stdout
        stream.write(content.get("text", ""))
        stream.flush()
    elif kind in ("execute_result", "display_data"):
        text = content.get("data", {}).get("text/plain")
        if text:
            print(text, flush=True)
    elif kind == "error":
        print("\n".join(content.get("traceback", [])), file=sys.stderr, flush=True)


def _failure(name: str, exc: Exception) -> str:
    """What stopped the notebook, as its user says it: the cell's exception and message."""
    ename, evalue = getattr(exc, "ename", None), getattr(exc, "evalue", None)
    if ename:
        return f"{name} failed: a cell raised {ename}" + (f": {evalue}" if evalue else "")
    return f"{name} failed: {type(exc).__name__}"


def _hint(message: str) -> None:
    """What to do about the error said just before."""
    _say(message, "info", "hint")


def _take_tag() -> None:
    """j2c's line tag (j2c_server/core/j2c_lines.py, which this runner cannot import), out of
    the environment the kernel inherits."""
    tag = os.environ.pop(TAG_ENV, None)
    _tag[0] = tag if tag is not None and _TAG_RE.fullmatch(tag) else None


def _say(message: str, level: str = "info", phase: str = "notebook") -> None:
    """One of j2c's lines, as core/j2c_lines.py's ``format_line`` writes it."""
    tag = _tag[0]
    head = f"j2c: {phase}" if tag is None else f"j2c[{tag}] {level} {phase}"
    print(f"{head}: {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
