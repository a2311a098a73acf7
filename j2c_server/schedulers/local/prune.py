"""The local runs folder kept bounded: a run's folder goes once its results are collected and
newer collected runs than ``scheduler.local.keep_runs`` exist.

The results stage is the last reader of a run (after the watch drained its log and the
registry holds its terminal state): collecting marks the folder ``collected`` and then removes
the oldest collected folders beyond the setting, with their entries in the key index. A run
that has files in ``outputs/`` is kept: those are its results' only copy (file:// artifact
links) when the job could not upload them to the store. A run never collected (its server
stopped first) is never removed: a restarted server still follows it from its files.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from j2c_server.schedulers.local.files import RunDir
from j2c_server.schedulers.state_files import read_json

COLLECTED = "collected"
KEYS = "keys"


def key_index(runs: Path, key: str) -> Path:
    return runs / KEYS / hashlib.sha256(key.encode()).hexdigest()


def mark_collected(run: RunDir) -> None:
    if run.path.is_dir():
        (run.path / COLLECTED).touch(mode=0o600)


def prune_collected(runs: Path, keep: int) -> list[str]:
    """Remove the collected runs beyond the newest ``keep``; the names removed."""
    collected: list[tuple[float, str]] = []
    with os.scandir(runs) as entries:
        for entry in entries:
            if entry.name == KEYS or not entry.is_dir(follow_symlinks=False):
                continue
            try:
                marked = os.stat(os.path.join(entry.path, COLLECTED)).st_mtime
            except FileNotFoundError:
                continue
            collected.append((marked, entry.name))
    collected.sort()
    removed = []
    for _, name in collected[: max(0, len(collected) - keep)]:
        run = RunDir(runs / name)
        if _has_outputs(run):
            continue
        key = (read_json(run.spec) or {}).get("key")
        shutil.rmtree(run.path, ignore_errors=True)
        if isinstance(key, str):
            key_index(runs, key).unlink(missing_ok=True)
        removed.append(name)
    return removed


def _has_outputs(run: RunDir) -> bool:
    try:
        with os.scandir(run.outputs) as entries:
            return any(True for _ in entries)
    except FileNotFoundError:
        return False
