"""Running the entry point with the venv's interpreter; signals in, exit code out.

- The venv's interpreter runs directly (``<venv>/bin/python``), never through a shebang or
  ``activate``: ``VIRTUAL_ENV``, ``PATH`` (the venv's ``bin`` first), ``PYTHONNOUSERSITE=1``,
  ``PYTHONUNBUFFERED=1`` and ``J2C_OUTPUT_DIR`` are set and ``PYTHONHOME`` and j2c's line tag
  (``J2C_LINE_TAG``: only the notebook runner gets it) are unset, on top of the job's
  environment and the manifest's ``env``.
- The working directory is the manifest's ``workdir`` inside the code layer.
- ``script``: ``python <code>/<target> ARGS``; ``module``: ``python -m <target> ARGS``;
  ``notebook``: ``python -I notebook.py <notebook> <output dir>/<name> ARGS`` (see notebook.py).
- The child gets its own process group. SIGTERM and SIGINT sent to j2c-unpack are forwarded to
  that whole group, so a preemption reaches the training loop and the workers it started. If
  j2c-unpack itself is killed, the kernel kills the child too (Linux ``PR_SET_PDEATHSIG``), so
  nothing keeps running unsupervised.
- The exit code is the child's; 128+N when signal N ended it.
- A sweep's variant with ``retries`` (``run_attempts``) is run again in place while it exits
  non-zero, up to that many more times, each re-run announced by one line; a run stopped by a
  signal (one forwarded to it, or SIGTERM/SIGINT ending it) is never re-run. The exit code is
  the last run's. Like torchrun's ``--max-restarts``, on the node the job already holds.

The child's stdout and stderr are the job's own: nothing is captured or re-printed.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from j2c_server.core.j2c_lines import TAG_ENV
from j2c_server.core.manifest_plan import ManifestPlan
from j2c_server.unpack import summary
from j2c_server.unpack.errors import EntryNotRunnable, ManifestInvalid
from j2c_server.unpack.log import say, tag, warn

FORWARDED = (signal.SIGTERM, signal.SIGINT)
NOTEBOOK_RUNNER = Path(__file__).with_name("notebook.py")
_MODULE_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_PR_SET_PDEATHSIG = 1
# Exit codes of a run a stop ended (128+N): never re-run.
_STOPPED_BY = frozenset(128 + signum for signum in FORWARDED)


def entry_command(
    manifest: ManifestPlan, code: Path, python: Path, output_dir: Path, extra_args: list[str]
) -> list[str]:
    """The argv that runs the manifest's entry point with ``python``."""
    entry = manifest.entry
    args = [*manifest.args, *extra_args]
    if entry.kind == "module":
        if not _MODULE_NAME.match(entry.target):
            raise ManifestInvalid(
                f"the entry module {entry.target!r} is not a module name", field="entry.target"
            )
        return [str(python), "-m", entry.target, *args]
    path = _inside(code, entry.target, "entry.target")
    if not path.is_file():
        raise EntryNotRunnable(
            f"the entry point {entry.target} is not in the code layer", field="entry.target"
        )
    if entry.kind == "script":
        return [str(python), str(path), *args]
    saved = output_dir / path.name
    return [str(python), "-I", str(NOTEBOOK_RUNNER), str(path), str(saved), *args]


def working_dir(manifest: ManifestPlan, code: Path) -> Path:
    cwd = _inside(code, manifest.workdir, "workdir")
    if not cwd.is_dir():
        raise EntryNotRunnable(
            f"the working directory {manifest.workdir!r} is not a folder of the code layer",
            field="workdir",
        )
    return cwd


def job_environment(manifest: ManifestPlan, venv: Path | None, output_dir: Path) -> dict[str, str]:
    env = {**os.environ, **manifest.env}
    env.pop("PYTHONHOME", None)
    if venv is not None:
        env["VIRTUAL_ENV"] = str(venv)
        env["PATH"] = os.pathsep.join(filter(None, [str(venv / "bin"), env.get("PATH")]))
    env["PYTHONNOUSERSITE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env["J2C_OUTPUT_DIR"] = str(output_dir)
    # j2c's line tag: never the job's own code's (log.py), but the notebook runner is j2c's
    # and tags its lines too (it takes the tag out of the environment its kernel gets).
    env.pop(TAG_ENV, None)
    if manifest.entry.kind == "notebook" and (given := tag()) is not None:
        env[TAG_ENV] = given
    return env


def run_child(
    argv: list[str],
    env: dict[str, str],
    cwd: Path,
    *,
    on_signal: Callable[[], None] | None = None,
) -> int:
    """Run ``argv`` in its own process group, forwarding SIGTERM/SIGINT; its exit code.
    ``on_signal`` is called on each forwarded signal (the outputs' sync: it must not block)."""
    child: subprocess.Popen[bytes] | None = None
    pending: list[int] = []

    def forward(signum: int, _frame: FrameType | None) -> None:
        summary.signalled(signal.Signals(signum).name)
        if on_signal is not None:
            on_signal()
        if child is None:
            pending.append(signum)  # arrived while the child was being started
            return
        say("running", f"forwarding {signal.Signals(signum).name} to the job")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signum)

    say("running", f"{shlex.join(argv)} (in {cwd})")
    previous = {signum: signal.signal(signum, forward) for signum in FORWARDED}
    try:
        try:
            child = subprocess.Popen(
                argv, cwd=cwd, env=env, start_new_session=True, preexec_fn=_die_with_parent()
            )
        except OSError as exc:
            raise EntryNotRunnable(f"cannot start {argv[0]}: {exc.strerror or exc}") from None
        for signum in pending:
            os.killpg(child.pid, signum)
        returncode = child.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 128 - returncode if returncode < 0 else returncode


def run_attempts(
    argv: list[str],
    env: dict[str, str],
    cwd: Path,
    *,
    retries: int,
    what: str,
    on_signal: Callable[[], None] | None = None,
) -> int:
    """:func:`run_child`, re-run while it exits non-zero, ``retries`` more times at most;
    never after a signal. ``what`` names the run in the re-run line ("variant 3")."""
    stopped: list[bool] = []

    def signalled() -> None:
        stopped.append(True)
        if on_signal is not None:
            on_signal()

    attempt = 0
    while True:
        code = run_child(argv, env, cwd, on_signal=signalled)
        if code == 0 or attempt >= retries:
            return code
        if stopped or code in _STOPPED_BY:
            say("running", f"{what} exited {code} after a signal: not re-run")
            return code
        attempt += 1
        warn("running", f"{what} exited {code}; re-running (retry {attempt} of {retries})")


def _inside(code: Path, relative: str, field: str) -> Path:
    path = Path(os.path.normpath(code / relative))
    if os.path.isabs(relative) or not path.is_relative_to(code):
        raise ManifestInvalid(f"{field} {relative!r} is outside the code layer", field=field)
    return path


def _die_with_parent() -> Callable[[], None] | None:
    """A pre-exec hook asking Linux to SIGKILL the child when j2c-unpack dies."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getpid()

    def hook() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # j2c-unpack died before the request took effect
            os._exit(128 + signal.SIGKILL)

    return hook
