"""JupyterHub configuration for the hub UI tests (ui-tests/hub-tests) only.

Started by ``scripts/hub-up.sh DIR``: a hub under the non-default base URL ``/hub-prefix/``,
users alice and bob (DummyAuthenticator with a password), each spawned by
SimpleLocalProcessSpawner as a JupyterLab single-user server (this Python environment's
``jupyter-labhub``, which loads the j2c extension) with its own HOME under DIR. j2c runs on its
defaults in each server: the local scheduler and the embedded file store, both under that
user's Jupyter data folder, so nothing is shared between the two users but the machine.

A service token with ``admin:servers`` lets the tests stop and start a user's server through
the hub's REST API. Never use this configuration outside tests: the password is public.
"""

import os
import sys
from pathlib import Path

_dir = Path(os.environ["J2C_HUB_DIR"]).resolve()
_port = int(os.environ.get("J2C_HUB_PORT", "8765"))
_bin = Path(sys.executable).parent
_proxy = Path(__file__).resolve().parent / "node_modules" / ".bin" / "configurable-http-proxy"

c = get_config()  # type: ignore[name-defined]  # noqa: F821

c.JupyterHub.bind_url = f"http://127.0.0.1:{_port}/hub-prefix/"
c.JupyterHub.hub_bind_url = f"http://127.0.0.1:{_port + 1}"
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{_port + 2}"
c.ConfigurableHTTPProxy.command = [str(_proxy)]
c.ConfigurableHTTPProxy.auth_token = os.environ["J2C_HUB_PROXY_TOKEN"]
c.JupyterHub.db_url = f"sqlite:///{_dir / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(_dir / "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = str(_dir / "jupyterhub.pid")
c.JupyterHub.cleanup_servers = True

c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = os.environ["J2C_HUB_PASSWORD"]
c.Authenticator.allowed_users = {"alice", "bob"}

c.JupyterHub.spawner_class = "simple"
c.SimpleLocalProcessSpawner.home_dir_template = str(_dir / "{username}")
c.Spawner.cmd = [str(_bin / "jupyter-labhub")]
c.Spawner.default_url = "/lab"
# The tests read each log panel's text through the page's JupyterLab object.
c.Spawner.args = ["--LabApp.expose_app_in_browser=True"]
# The checkout's own build of the extension, when there is one (scripts/setup.sh links it into
# the environment too; this also holds for a worktree whose environment links another checkout).
_built = Path(__file__).resolve().parent.parent / "j2c_server" / "labextension"
if (_built / "package.json").is_file():
    _extensions = _dir / "labextensions"
    _extensions.mkdir(exist_ok=True)
    if not (_extensions / "j2c").exists():
        (_extensions / "j2c").symlink_to(_built)
    c.Spawner.args.append(f"--LabServerApp.extra_labextensions_path={_extensions}")
if os.getuid() == 0:
    c.Spawner.args.append("--allow-root")
# Two cores shared with the browser: a first lab start can take a while.
c.Spawner.start_timeout = 180
c.Spawner.http_timeout = 180

c.JupyterHub.services = [{"name": "j2c-tests", "api_token": os.environ["J2C_HUB_ADMIN_TOKEN"]}]
c.JupyterHub.load_roles = [
    {"name": "j2c-tests", "scopes": ["admin:servers", "list:users"], "services": ["j2c-tests"]}
]
