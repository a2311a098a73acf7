"""The ``remote`` plug-in's job runner: ``python runner.py <run folder>``.

It forks into a new session and returns at once (the job outlives whoever submitted it, and
leaves no zombie there), starts the job's command in a session of its own with its output in
``output.log``, stops it when a ``cancel`` file appears (SIGTERM, SIGKILL after the grace),
kills whatever the job left in its process group, and writes the exit code (128 + the signal
when killed) to ``exit_code`` last, atomically: the job has ended when that file exists.
Standard library only: it runs where j2c is not imported.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def _killpg(pid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


def run(folder: Path) -> int:
    spec = json.loads((folder / "spec.json").read_text())
    env = {**os.environ, **spec["env"], "PYTHONUNBUFFERED": "1"}
    with open(folder / "output.log", "ab") as out:
        try:
            child = subprocess.Popen(
                spec["command"],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=folder,
                start_new_session=True,
            )
        except OSError as exc:
            out.write(f"cannot start {spec['command'][0]}: {exc.strerror}\n".encode())
            return 127
        (folder / "child.pid").write_text(str(child.pid))
        stop_at: float | None = None
        while (code := child.poll()) is None:
            if stop_at is None and (folder / "cancel").exists():
                stop_at = time.monotonic() + float(spec["grace"])
                _killpg(child.pid, signal.SIGTERM)
            elif stop_at is not None and time.monotonic() > stop_at:
                _killpg(child.pid, signal.SIGKILL)
            time.sleep(0.05)
        _killpg(child.pid, signal.SIGKILL)  # what the job started and left behind
        return 128 - code if code < 0 else code


def main() -> None:
    folder = Path(sys.argv[1])
    if os.fork():
        os._exit(0)  # the submitter's subprocess.run returns now
    os.setsid()
    (folder / "runner.pid").write_text(str(os.getpid()))
    code = run(folder)
    (folder / "exit_code.tmp").write_text(str(code))
    (folder / "exit_code.tmp").replace(folder / "exit_code")


if __name__ == "__main__":
    main()
