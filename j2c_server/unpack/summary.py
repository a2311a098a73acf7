"""j2c-unpack's last line: one JSON object on stderr that a cluster's log pipeline can parse.

``summary: {"j2c_unpack": "summary", "exit_code": N, "seconds": T, "phases": {name:
seconds}, "bytes_downloaded": B, "bytes_reused": R}``, as every j2c line, after the job's tag,
level (info) and this phase's name (``j2c[<tag>] info summary: {...}``; without a tag
``j2c: summary: {...}``). Phases are the stages that finished (their seconds added up when one
runs more than once); bytes downloaded are layer bytes fetched from the store, bytes reused
those a node cache or an earlier try of the same job already held, bytes restored those of a
resumed attempt's checkpoints (restore.py); signals the ones sent to j2c-unpack from outside (a
cancel, a preemption, an engine stopping the container).

With ``J2C_UNPACK_END_FILE`` set (the container backend sets it to a file in the job's host
folder), the same JSON is also written there, atomically, as the very last thing: a container
whose j2c-unpack left no such file was killed from outside, not ended by its job
(:func:`write_end_file`). Standard library only, as the rest of the start-up path.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable
from typing import Final

PHASE: Final = "summary"
_lock = threading.Lock()  # downloads report from several threads
_started = time.monotonic()
_phases: dict[str, float] = {}
_bytes = {"downloaded": 0, "reused": 0, "restored": 0}
_signals: list[str] = []
END_FILE_ENV = "J2C_UNPACK_END_FILE"


def phase_done(name: str, seconds: float) -> None:
    with _lock:
        _phases[name] = _phases.get(name, 0.0) + seconds


def add_bytes(*, downloaded: int = 0, reused: int = 0, restored: int = 0) -> None:
    with _lock:
        _bytes["downloaded"] += downloaded
        _bytes["reused"] += reused
        _bytes["restored"] += restored


def signalled(name: str) -> None:
    """A signal (``SIGTERM``) reached j2c-unpack from outside (called from its handlers: no
    lock, appends are atomic)."""
    if name not in _signals:
        _signals.append(name)


def summary(exit_code: int) -> dict[str, object]:
    with _lock:
        return {
            "j2c_unpack": "summary",
            "exit_code": exit_code,
            "seconds": round(time.monotonic() - _started, 3),
            "phases": {name: round(seconds, 3) for name, seconds in _phases.items()},
            "bytes_downloaded": _bytes["downloaded"],
            "bytes_reused": _bytes["reused"],
            "bytes_restored": _bytes["restored"],
            "signals": list(_signals),
        }


def emit(exit_code: int, say: Callable[[str, str], None]) -> None:
    """Say the summary line (``say``: the log's); a closed stderr is no reason to change the
    exit code."""
    with contextlib.suppress(OSError, ValueError):
        say(PHASE, json.dumps(summary(exit_code), separators=(",", ":")))


def write_end_file(exit_code: int) -> None:
    """The summary into ``$J2C_UNPACK_END_FILE`` (temp file, then renamed), when it is set; a
    failure to write it is no reason to change the exit code."""
    target = os.environ.get(END_FILE_ENV)
    if not target:
        return
    temporary = f"{target}.{os.getpid()}.tmp"
    try:
        with open(temporary, "w") as handle:
            json.dump(summary(exit_code), handle)
        os.replace(temporary, target)
    except OSError:
        pass
