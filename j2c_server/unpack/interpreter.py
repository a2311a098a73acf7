"""This container's base Python, and the check that the shipped venv was made for its version.

The venv layer holds only the user's own packages; everything else (PyTorch, CUDA bindings, the
standard library) comes from the image's interpreter through ``--system-site-packages``. A venv
made for 3.11 on a 3.12 interpreter hides every venv package while the base copies load
silently, so the major.minor check runs before anything is downloaded.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from j2c_server.core.manifest_plan import ManifestPlan
from j2c_server.unpack.errors import PythonMismatch


@dataclass(frozen=True)
class Interpreter:
    executable: Path
    version: str  # major.minor

    @property
    def home(self) -> Path:
        """What ``pyvenv.cfg``'s ``home`` names: the folder of the base executable."""
        return self.executable.parent


def this_interpreter() -> Interpreter:
    """The base interpreter under this process (itself, or the one under its own venv)."""
    # sys._base_executable is the base interpreter even when j2c-unpack runs from a venv.
    executable = getattr(sys, "_base_executable", None) or sys.executable
    return Interpreter(Path(executable), f"{sys.version_info.major}.{sys.version_info.minor}")


def check_python(manifest: ManifestPlan, interpreter: Interpreter) -> None:
    """Raise PythonMismatch unless the venv's major.minor is this interpreter's."""
    if manifest.venv is None or manifest.venv.python_version == interpreter.version:
        return
    image = manifest.source_image or "the lab's image (not recorded in the manifest)"
    raise PythonMismatch(
        f"the venv was made with Python {manifest.venv.python_version}, but this container "
        f"runs Python {interpreter.version} ({interpreter.executable})",
        field="venv.python_version",
        hint=f"run the job in {image}, or rebuild the venv with Python {interpreter.version}",
    )
