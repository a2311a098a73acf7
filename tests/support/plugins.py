"""Scheduler plug-ins installed for a test as an operator's package would be: the packages of
``tests/plugins`` copied into a throw-away site folder with a ``*.dist-info`` whose
``entry_points.txt`` registers them in ``j2c.schedulers``, found by ``importlib.metadata`` in
a subprocess whose ``PYTHONPATH`` names the folder."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

PLUGINS = Path(__file__).parents[1] / "plugins"
# Every entry point of the test distribution: a working backend, one whose import fails, one
# that is not a backend class, one whose name cannot be a settings key.
ENTRY_POINTS = {
    "remote": "j2c_test_remote:RemoteScheduler",
    "broken": "j2c_test_broken:BrokenScheduler",
    "notabackend": "j2c_test_remote:RemoteSettings",
    "pass_env": "j2c_test_remote:RemoteScheduler",
}


def install_plugins(site: Path, entry_points: dict[str, str] | None = None) -> dict[str, str]:
    """Install the test plug-ins into ``site``; the environment of a subprocess that sees them
    (no ``J2C_*`` variables of this process: a scheduler section of the test's own only)."""
    site.mkdir(parents=True, exist_ok=True)
    for package in ("j2c_test_remote", "j2c_test_broken"):
        shutil.copytree(PLUGINS / package, site / package, dirs_exist_ok=True)
    dist = site / "j2c_test_plugins-1.0.dist-info"
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: j2c-test-plugins\nVersion: 1.0\n")
    points = ENTRY_POINTS if entry_points is None else entry_points
    lines = "".join(f"{name} = {target}\n" for name, target in points.items())
    (dist / "entry_points.txt").write_text(f"[j2c.schedulers]\n{lines}")
    env = {name: value for name, value in os.environ.items() if not name.startswith("J2C_")}
    env["PYTHONPATH"] = os.pathsep.join([str(site), os.getcwd()])
    return env
