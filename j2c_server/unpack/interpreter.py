"""The base Python the shipped venv runs on here, and the check that the venv was made for its
version.

The venv layer holds only the user's own packages; everything else (PyTorch, CUDA bindings, the
standard library) comes from a base interpreter through ``--system-site-packages``. That base
is the venv's **own** (the one it was made with in the lab, recorded in the manifest) when this
node has it at the same path and version: a lab whose venv leans on a system or conda Python
keeps that Python's packages, whatever Python runs ``j2c-unpack``. Otherwise it is this node's
Python (the image's), as the platform design says. A venv made for 3.11 on a 3.12 interpreter
hides every venv package while the base copies load silently, so the major.minor check runs
before anything is downloaded.
"""

from __future__ import annotations

import os
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


def venv_interpreter(manifest: ManifestPlan) -> tuple[Interpreter, str | None]:
    """The base interpreter the venv runs on here, and the log line that says which and why
    (None: the venv's own base is the one running ``j2c-unpack``, nothing to say)."""
    here = this_interpreter()
    venv = manifest.venv
    if venv is None:
        return here, None
    own = _recorded_base(Path(venv.home), venv.python_version)
    if own is not None and _same_file(own, here.executable):
        return here, None
    if own is not None:
        return (
            Interpreter(own, venv.python_version),
            f"bound to its own base Python {venv.python_version} ({own}), as in the lab",
        )
    return here, (
        f"its own base Python ({venv.home}/python{venv.python_version}) is not on this node: "
        f"bound to this node's Python {here.version} ({here.executable})"
    )


def _recorded_base(home: Path, version: str) -> Path | None:
    """The venv's base interpreter in ``home`` when this node has it at that version."""
    for name in (f"python{version}", "python3", "python"):
        candidate = home / name
        try:  # a folder this uid may not enter (the lab's /root/...) is a base it cannot run
            runnable = candidate.is_file() and os.access(candidate, os.X_OK)
            real = os.path.realpath(candidate)
        except OSError:
            return None
        # The version by name, as venv and the distributions write it (python3 -> python3.11):
        # nothing is run to know it.
        if runnable and os.path.basename(real) == f"python{version}":
            return candidate
    return None


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


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
