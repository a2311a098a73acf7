"""j2c: send a JupyterLab experiment (project + venv) to a GPU cluster, with live logs.

This module only declares the Jupyter entry points; importing it stays cheap because
``j2c-unpack`` (inside the training container) imports submodules of this package.
"""

from __future__ import annotations

from typing import Any

__all__ = ["__version__"]

from j2c_server.core.version import __version__


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "j2c"}]


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    from j2c_server.server.app import J2CApp

    return [{"module": "j2c_server", "app": J2CApp}]


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext j2c_server`` registers the ``%j2c`` / ``%%j2c`` magics."""
    from j2c_server.magic.magics import register

    register(ipython)
