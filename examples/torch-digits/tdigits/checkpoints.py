"""Checkpoints in a folder (default ``checkpoints/``): ``step-NNNNNN.pt`` holding the model,
the optimizer and the step, written to a temporary name and renamed, so a reader (or a job
killed mid-write) never sees half of one. The latest one is where a run resumes."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import torch

_NAME = re.compile(r"^step-(\d+)\.pt$")


def latest(folder: Path) -> Path | None:
    found = [(int(m.group(1)), p) for p in folder.glob("step-*.pt") if (m := _NAME.match(p.name))]
    return max(found)[1] if found else None


def save(folder: Path, step: int, state: dict[str, Any], keep: int = 3) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"step-{step:06d}.pt"
    temporary = folder / f".{target.name}.tmp"
    torch.save({"step": step, **state}, temporary)
    os.replace(temporary, target)
    for old in sorted(folder.glob("step-*.pt"))[:-keep]:
        old.unlink(missing_ok=True)
    return target


def load(path: Path) -> dict[str, Any]:
    state: dict[str, Any] = torch.load(path, map_location="cpu")
    return state
