"""j2c-unpack's last line: one JSON object on stderr that a cluster's log pipeline can parse.

``summary: {"j2c_unpack": "summary", "exit_code": N, "seconds": T, "phases": {name:
seconds}, "bytes_downloaded": B, "bytes_reused": R}``, as every j2c line, after the job's tag,
level (info) and this phase's name (``j2c[<tag>] info summary: {...}``; without a tag
``j2c: summary: {...}``). Phases are the stages that finished (their seconds added up when one
runs more than once); bytes downloaded are layer bytes fetched from the store, bytes reused
those a node cache or an earlier try of the same job already held. Standard library only, as
the rest of the start-up path.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from typing import Final

PHASE: Final = "summary"
_lock = threading.Lock()  # downloads report from several threads
_started = time.monotonic()
_phases: dict[str, float] = {}
_bytes = {"downloaded": 0, "reused": 0}


def phase_done(name: str, seconds: float) -> None:
    with _lock:
        _phases[name] = _phases.get(name, 0.0) + seconds


def add_bytes(*, downloaded: int = 0, reused: int = 0) -> None:
    with _lock:
        _bytes["downloaded"] += downloaded
        _bytes["reused"] += reused


def summary(exit_code: int) -> dict[str, object]:
    with _lock:
        return {
            "j2c_unpack": "summary",
            "exit_code": exit_code,
            "seconds": round(time.monotonic() - _started, 3),
            "phases": {name: round(seconds, 3) for name, seconds in _phases.items()},
            "bytes_downloaded": _bytes["downloaded"],
            "bytes_reused": _bytes["reused"],
        }


def emit(exit_code: int, say: Callable[[str, str], None]) -> None:
    """Say the summary line (``say``: the log's); a closed stderr is no reason to change the
    exit code."""
    with contextlib.suppress(OSError, ValueError):
        say(PHASE, json.dumps(summary(exit_code), separators=(",", ":")))
