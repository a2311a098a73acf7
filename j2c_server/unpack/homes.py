"""Where the layers land: back at their original absolute paths, or under the workdir.

- ``original``: code and venv return to the absolute paths they were packed from
  (``layer.source_path``), so every path embedded in the venv stays true. That needs each path to
  be free (absent, or an empty folder) and writable; when one is not, the layers go under the
  workdir instead, and j2c-unpack says why.
- ``relocate``: code at ``<workdir>/code``; the venv at ``<workdir>/venv``, or at the same place
  inside the code folder when it lived inside the project. The paths the venv embeds are then
  rewritten (relocate.py).

In relocate mode a previous run's ``code``/``venv`` folders in the workdir (a restarted job) are
replaced; the workdir is j2c-unpack's own (workdir.py), so nothing else is ever removed.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..models import Layer, LayerRole, Manifest
from .errors import LocalIOError, ManifestInvalid
from .log import say

Mode = Literal["original", "relocate"]


@dataclass(frozen=True)
class Placement:
    mode: Mode
    homes: dict[LayerRole, Path]  # where each layer is extracted
    moves: dict[str, str]  # original path -> new path, for the layers that moved

    @property
    def code(self) -> Path:
        return self.homes[LayerRole.code]

    @property
    def venv(self) -> Path | None:
        return self.homes.get(LayerRole.venv)


def place_layers(manifest: Manifest, mode: Mode, workdir: Path) -> Placement:
    """Decide where each layer goes; in relocate mode, clear what a previous run left there."""
    layers = _layers(manifest)
    originals = {role: Path(layer.source_path) for role, layer in layers.items()}
    if mode == "original":
        reasons = [f"{path} {why}" for path in originals.values() if (why := _unavailable(path))]
        if not reasons:
            return Placement("original", originals, {})
        say("placing", f"relocating under {workdir}: {'; '.join(reasons)}")
    homes = _relocated_homes(originals, workdir)
    for home in homes.values():
        _remove_previous(home)
    moves = {str(originals[role]): str(homes[role]) for role in homes}
    return Placement("relocate", homes, moves)


def _layers(manifest: Manifest) -> dict[LayerRole, Layer]:
    by_role: dict[LayerRole, Layer] = {}
    for layer in manifest.layers:
        if layer.role in by_role:
            raise ManifestInvalid(f"the manifest has two {layer.role.value} layers", field="layers")
        if not os.path.isabs(layer.source_path):
            raise ManifestInvalid(
                f"the {layer.role.value} layer's source_path {layer.source_path!r} is not absolute",
                field="layers.source_path",
            )
        by_role[layer.role] = layer
    if LayerRole.code not in by_role:
        raise ManifestInvalid("the manifest has no code layer", field="layers")
    if (LayerRole.venv in by_role) != (manifest.venv is not None):
        raise ManifestInvalid("the manifest's venv facts and venv layer disagree", field="venv")
    return by_role


def _relocated_homes(originals: dict[LayerRole, Path], workdir: Path) -> dict[LayerRole, Path]:
    code = workdir / "code"
    homes = {LayerRole.code: code}
    venv = originals.get(LayerRole.venv)
    if venv is not None:
        project = originals[LayerRole.code]
        # A venv inside the project keeps its place relative to the code.
        inside = venv.is_relative_to(project)
        homes[LayerRole.venv] = code / venv.relative_to(project) if inside else workdir / "venv"
    return homes


def _unavailable(path: Path) -> str | None:
    """Why ``path`` cannot receive a layer, or None when it can."""
    if os.path.lexists(path):
        if path.is_symlink() or not path.is_dir():
            return "exists and is not a folder"
        if any(path.iterdir()):
            return "is not empty"
        return None if os.access(path, os.W_OK | os.X_OK) else "is not writable"
    parent = path.parent
    while not parent.exists():
        parent = parent.parent
    if parent.is_dir() and os.access(parent, os.W_OK | os.X_OK):
        return None
    return f"cannot be created ({parent} is not writable)"


def _remove_previous(home: Path) -> None:
    """Remove a previous run's layer folder inside the (marked) workdir."""
    try:
        if home.is_symlink() or home.is_file():
            home.unlink()
        elif home.exists():
            shutil.rmtree(home)
    except OSError as exc:
        raise LocalIOError(f"cannot clear {home}: {exc.strerror or exc}") from None
