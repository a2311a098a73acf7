"""The lab's own Python (this machine's base interpreter, not the test venv's) for tests that
send a project whose venv leans on it to an image that is not the lab."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

LAB_PYTHON = Path(getattr(sys, "_base_executable", sys.executable))


def lab_has(*modules: str) -> bool:
    """Whether the lab's base Python imports every one of ``modules``."""
    code = "import " + ", ".join(modules)
    return subprocess.run([str(LAB_PYTHON), "-I", "-c", code], capture_output=True).returncode == 0


def lab_venv(root: Path) -> Path:
    """A ``--system-site-packages`` venv of the lab's Python at ``root/.venv``."""
    venv = root / ".venv"
    subprocess.run([str(LAB_PYTHON), "-m", "venv", "--system-site-packages", str(venv)], check=True)
    return venv
