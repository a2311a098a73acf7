"""Scheduler plug-ins that cannot break the house: installed from the test package
(``tests/plugins``, :mod:`tests.support.plugins`) next to a plug-in that fails to import, one
that is not a backend and one whose name cannot be a settings key, every front end works, in
real subprocesses: ``j2c --help``, ``j2c config``, ``j2c-unpack --help``, ``%j2c``, and a real
Jupyter server's ``GET /j2c/api/config``. The broken ones are named as skipped with why; the
working one, written the way the built-ins are (``j2c_server.config`` imported at its top), is
listed, configured and made; a section for a skipped one is a warning, not an error.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.plugins import install_plugins

J2C = str(Path(sys.executable).with_name("j2c"))
UNPACK = str(Path(sys.executable).with_name("j2c-unpack"))
TIMEOUT_S = 120
MISSING = "ModuleNotFoundError: No module named 'j2c_test_quantum_client'"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    env = install_plugins(tmp_path / "site")
    env["J2C_DATA_DIR"] = str(tmp_path / "data")
    env["JUPYTER_CONFIG_DIR"] = str(tmp_path / "jupyter-config")
    env["JUPYTER_RUNTIME_DIR"] = str(tmp_path / "jupyter-runtime")
    env["J2C_SCHEDULER__REMOTE__SITE"] = "mars"
    env["J2C_SCHEDULER__BROKEN__QUEUE"] = "q1"  # the skipped plug-in's section
    return env


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return _run([sys.executable, "-c", code], env)


def _check_skipped(skipped: dict[str, str]) -> None:
    assert set(skipped) == {"broken", "notabackend", "pass_env"}
    assert skipped["broken"] == f"j2c_test_broken:BrokenScheduler: {MISSING}"
    assert skipped["notabackend"].endswith("not a SchedulerBase subclass")
    assert "'pass_env' cannot be a scheduler's name" in skipped["pass_env"]


def test_the_cli_and_unpack_work_and_name_the_skipped_plugins(env: dict[str, str]) -> None:
    assert _run([J2C, "--help"], env).returncode == 0
    assert _run([UNPACK, "--help"], env).returncode == 0
    assert _python("import j2c_server.storage.download", env).returncode == 0

    shown = _run([J2C, "config", "--json"], env)
    assert shown.returncode == 0, shown.stderr
    config = json.loads(shown.stdout)
    _check_skipped(config["skipped_schedulers"])
    assert config["schedulers"][-1] == "remote"
    assert config["scheduler"]["remote"] == {"site": "mars"}
    assert "broken" not in config["scheduler"]
    assert "scheduler.broken ignored: the broken scheduler plug-in was skipped" in shown.stderr

    text = _run([J2C, "config"], env)
    assert text.returncode == 0, text.stderr
    assert "# schedulers: local, slurm, kubernetes, container, ray, remote\n" in text.stdout
    assert f"# scheduler plug-in skipped: broken: j2c_test_broken:BrokenScheduler: {MISSING}\n" in (
        text.stdout
    )


_SERVICE_SIDE = """
import json
from j2c_server.config import load_settings
from j2c_server.core.errors import InvalidInput
from j2c_server.jobs.send.preflight import store_problem
from j2c_server.schedulers import make_scheduler

settings = load_settings(overrides={"storage": {"url": "file:///srv/j2c"}})
try:
    make_scheduler("broken", settings)
except InvalidInput as exc:
    refused = [exc.field, exc.message]
print(json.dumps({
    "site": make_scheduler("remote", settings).site,
    "refused": refused,
    "remote_store": store_problem(settings, "remote"),
    "local_store": store_problem(settings, "local"),
}))
"""


def test_the_working_plugin_is_made_and_the_broken_one_refused_naming_why(
    env: dict[str, str],
) -> None:
    done = _python(_SERVICE_SIDE, env)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["site"] == "mars"
    field, message = answer["refused"]
    assert field == "scheduler"
    assert message.startswith("scheduler 'broken' is not available: its plug-in was skipped")
    assert MISSING in message
    # A remote plug-in gets the store check without a line in jobs/ (SchedulerBase.remote).
    assert "remote jobs run on other machines" in answer["remote_store"]
    assert answer["local_store"] is None


_MAGIC = """
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
shell.run_line_magic("load_ext", "j2c_server")
shell.run_line_magic("j2c", "list --json")
"""


def test_the_magic_works(env: dict[str, str]) -> None:
    done = _python(_MAGIC, env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
    assert f"scheduler plug-in 'broken' skipped: j2c_test_broken:BrokenScheduler: {MISSING}" in (
        done.stderr
    )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_the_server_starts_and_its_config_route_names_them(
    env: dict[str, str], tmp_path: Path
) -> None:
    port, token = _free_port(), "plugin-test-token"
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter_server",
            f"--ServerApp.port={port}",
            "--ServerApp.ip=127.0.0.1",
            f"--IdentityProvider.token={token}",
            "--ServerApp.open_browser=False",
            "--allow-root",  # CI containers run as root
            f"--ServerApp.root_dir={tmp_path}",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}/j2c/api/config?token={token}"
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            if server.poll() is not None:
                raise AssertionError(f"the server exited: {server.communicate()[1]}")
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    config = json.loads(response.read())
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
    finally:
        server.terminate()
        _, stderr = server.communicate(timeout=30)
    _check_skipped(config["skipped_schedulers"])
    assert config["scheduler_kinds"] == sorted(
        ["local", "slurm", "kubernetes", "container", "ray", "remote"]
    )
    assert config["capabilities"]["remote"]["gpus"] is True
    assert f"scheduler plug-in 'broken' skipped: j2c_test_broken:BrokenScheduler: {MISSING}" in (
        stderr
    )
