"""Build hook: without Node.js, a clear error naming the ways out instead of jlpm's.

Building j2c from source builds the JupyterLab extension with Node.js (hatch-jupyter-builder).
The compute side (``j2c-unpack``) and the server need none of it: ``SKIP_JUPYTER_BUILDER=1``
builds the Python package alone (hatch-jupyter-builder's own switch). When Node.js is missing,
the extension is not built yet and that switch is not set, this hook stops the build first and
says so; it runs before the jupyter-builder hook (pyproject.toml lists it first).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

BUILT = Path("j2c_server") / "labextension" / "static" / "style.js"
NO_NODE = (
    "j2c: building the JupyterLab extension needs Node.js, which is not on PATH. Either\n"
    "  - install the wheel instead (pip install j2c-<version>-py3-none-any.whl: it has the\n"
    "    extension already built; a platform image should install that wheel), or\n"
    "  - for the server and j2c-unpack alone (no lab UI, e.g. a compute image):\n"
    "    SKIP_JUPYTER_BUILDER=1 pip install .\n"
    "  - or install Node.js >= 18 and build again."
)


class NodeCheckHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name not in ("wheel", "sdist") or os.environ.get("SKIP_JUPYTER_BUILDER"):
            return
        # A standard build reuses a built extension (skip-if-exists); an editable one rebuilds.
        if version == "standard" and (Path(self.root) / BUILT).exists():
            return
        if shutil.which("node") is None:
            raise RuntimeError(NO_NODE)
