"""Jupyter server configuration for the Galata UI tests only.

Galata's helper opens the server without a token and exposes JupyterLab objects to the page:
never use this configuration outside tests. The server root is a temporary folder holding a
copy of ``examples/digits`` with its venv made on top of the base Python
(``--system-site-packages``), so the tests send a real project on the local scheduler. A
second venv at a non-standard place, ``envs/digits-env``, runs the kernel ``digits-env`` that
the served copy of ``digits/explore.ipynb`` asks for: the form proposes a kernel's venv.
"""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
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

# A kernel in a venv inside the root; like a lab image, ipykernel is a system package: the
# venv's site-packages reach this server's by a .pth file.
_env = _root / "envs" / "digits-env"
subprocess.run(
    [str(_base_python), "-m", "venv", "--system-site-packages", "--without-pip", str(_env)],
    check=True,
)
_env_purelib = sysconfig.get_path("purelib", vars={"base": str(_env), "platbase": str(_env)})
_server_purelib = sysconfig.get_paths()["purelib"]
Path(_env_purelib, "lab-image.pth").write_text(
    f"import site; site.addsitedir({_server_purelib!r})\n"
)
# The kernel spec lives in a data folder of its own, found through JUPYTER_PATH (read when the
# server makes its kernel spec manager, after this file runs).
_data = Path(tempfile.mkdtemp(prefix="j2c-ui-jupyter-data-"))
(_data / "kernels" / "digits-env").mkdir(parents=True)
(_data / "kernels" / "digits-env" / "kernel.json").write_text(
    json.dumps(
        {
            "argv": [
                str(_env / "bin" / "python"),
                "-m",
                "ipykernel_launcher",
                "-f",
                "{connection_file}",
            ],
            "display_name": "digits-env",
            "language": "python",
        }
    )
)
os.environ["JUPYTER_PATH"] = os.pathsep.join(
    [str(_data), *filter(None, [os.environ.get("JUPYTER_PATH")])]
)
_notebook = _project / "explore.ipynb"
_content = json.loads(_notebook.read_text())
_content["metadata"]["kernelspec"] = {
    "display_name": "digits-env",
    "language": "python",
    "name": "digits-env",
}
_notebook.write_text(json.dumps(_content, indent=1))

c.ServerApp.root_dir = str(_root)  # type: ignore[name-defined]  # noqa: F821
