"""Jupyter server configuration for the Galata UI tests only.

Galata's helper opens the server without a token and exposes JupyterLab objects to the page:
never use this configuration outside tests. The server root is a temporary folder holding a
copy of ``examples/digits`` with its venv made on top of the base Python
(``--system-site-packages``), so the tests send a real project on the local scheduler.
"""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from jupyterlab.galata import configure_jupyter_server

configure_jupyter_server(c)  # type: ignore[name-defined]  # noqa: F821
c.ServerApp.allow_root = True  # type: ignore[name-defined]  # noqa: F821

# Each UI test run gets its own registry, cache and embedded store.
os.environ.setdefault("J2C_DATA_DIR", tempfile.mkdtemp(prefix="j2c-ui-data-"))

# The tests send the example project; serve a copy so runs never touch the checkout.
_root = Path(tempfile.mkdtemp(prefix="j2c-ui-root-"))
_example = Path(__file__).resolve().parent.parent / "examples" / "digits"
_project = _root / "digits"
shutil.copytree(_example, _project, ignore=shutil.ignore_patterns(".venv", "__pycache__"))
_base_python = Path(sys.base_prefix) / "bin" / "python3"
subprocess.run(
    [str(_base_python), "-m", "venv", "--system-site-packages", str(_project / ".venv")],
    check=True,
)
_venv_python = _project / ".venv" / "bin" / "python"
if subprocess.run([str(_venv_python), "-c", "import numpy"], capture_output=True).returncode:
    subprocess.run(
        [str(_venv_python), "-m", "pip", "install", "-q", "-r", str(_project / "requirements.txt")],
        check=True,
    )

c.ServerApp.root_dir = str(_root)  # type: ignore[name-defined]  # noqa: F821
