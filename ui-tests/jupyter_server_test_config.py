"""Jupyter server configuration for the Galata UI tests only.

Galata's helper opens the server without a token and exposes JupyterLab objects to the page:
never use this configuration outside tests.
"""

import os
import tempfile
from pathlib import Path

from jupyterlab.galata import configure_jupyter_server

configure_jupyter_server(c)  # type: ignore[name-defined]  # noqa: F821
c.ServerApp.allow_root = True  # type: ignore[name-defined]  # noqa: F821

# Each UI test run gets its own registry, cache and embedded store.
os.environ.setdefault("J2C_DATA_DIR", tempfile.mkdtemp(prefix="j2c-ui-data-"))

# The tests send the example project; serve a copy so runs never touch the checkout.
_root = Path(tempfile.mkdtemp(prefix="j2c-ui-root-"))
c.ServerApp.root_dir = str(_root)  # type: ignore[name-defined]  # noqa: F821
