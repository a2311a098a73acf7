"""This machine's GPUs for the local scheduler: which exist, and which job holds which.

The ledger ``<data>/runs/gpus.json`` is read and written only under an exclusive flock on
``<data>/runs/gpus.lock``, so supervisors started by different servers, kernels and CLIs never
hand out one GPU twice. Waiting jobs are served first come, first served. A holder or waiter whose
supervisor is gone (its run lock is free) is dropped at the next look, so a killed job never keeps
its GPUs.

The supervisor imports this module, so it stays on the standard library.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .local_files import RunDir, exclusive_lock, is_held, read_json, write_json_atomic

_DETECT_TIMEOUT_S = 10.0


def detect_gpu_ids(configured: int | None, environ: Mapping[str, str]) -> list[str]:
    """The device ids jobs may be given, as ``CUDA_VISIBLE_DEVICES`` entries.

    A configured count wins. Otherwise a lab that was itself given some GPUs (its own
    ``CUDA_VISIBLE_DEVICES``) shares exactly those; otherwise ``nvidia-smi -L`` counts them.
    """
    if configured is not None:
        return [str(index) for index in range(configured)]
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [entry.strip() for entry in visible.split(",") if entry.strip()]
    nvidia_smi = shutil.which("nvidia-smi", path=environ.get("PATH"))
    if nvidia_smi is None:
        return []
    try:
        listing = subprocess.run(
            [nvidia_smi, "-L"],
            capture_output=True,
            text=True,
            timeout=_DETECT_TIMEOUT_S,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []  # a driver that does not answer offers no GPUs
    count = sum(1 for line in listing.splitlines() if line.startswith("GPU "))
    return [str(index) for index in range(count)]


@dataclass(frozen=True)
class Grant:
    """The outcome of one try: the devices given, or how many are free while waiting."""

    devices: list[str] | None
    free: int


class GpuLedger:
    def __init__(self, runs_root: Path) -> None:
        self._lock = runs_root / "gpus.lock"
        self._ledger = runs_root / "gpus.json"

    @contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        with exclusive_lock(self._lock):
            state = read_json(self._ledger) or {}
            state.setdefault("holders", {})
            state.setdefault("waiting", [])
            yield state
            write_json_atomic(self._ledger, state)

    @staticmethod
    def _drop_dead(state: dict[str, Any], me: str) -> None:
        def alive(entry: dict[str, Any]) -> bool:
            return entry["job_id"] == me or is_held(RunDir(Path(entry["run_dir"])).lock)

        state["holders"] = {gpu: e for gpu, e in state["holders"].items() if alive(e)}
        state["waiting"] = [e for e in state["waiting"] if alive(e)]

    def try_acquire(self, job_id: str, run_dir: Path, count: int, devices: list[str]) -> Grant:
        """Give ``count`` of ``devices`` to the job if it is first in line and they are free;
        otherwise keep (or put) it in line."""
        with self._locked() as state:
            self._drop_dead(state, job_id)
            waiting: list[dict[str, Any]] = state["waiting"]
            if not any(entry["job_id"] == job_id for entry in waiting):
                waiting.append({"job_id": job_id, "run_dir": str(run_dir), "gpus": count})
            free = [device for device in devices if device not in state["holders"]]
            if waiting[0]["job_id"] != job_id or len(free) < count:
                return Grant(devices=None, free=len(free))
            granted = free[:count]
            for device in granted:
                state["holders"][device] = {"job_id": job_id, "run_dir": str(run_dir)}
            state["waiting"] = waiting[1:]
            return Grant(devices=granted, free=len(free) - count)

    def release(self, job_id: str) -> None:
        """Free the job's GPUs and its place in line."""
        with self._locked() as state:
            state["holders"] = {
                gpu: e for gpu, e in state["holders"].items() if e["job_id"] != job_id
            }
            state["waiting"] = [e for e in state["waiting"] if e["job_id"] != job_id]
