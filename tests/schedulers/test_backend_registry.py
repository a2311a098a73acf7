"""Clients by name: the built-in table, a plug-in added by another package's entry point (no
fork of j2c), each backend's settings section typed by its own model, and what it supports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from j2c_server.config import J2CSettings
from j2c_server.core.errors import InvalidInput
from j2c_server.schedulers import known_backends, scheduler_class

PLUGIN = """
from pydantic import BaseModel
from j2c_server.wire.api import Capabilities
from j2c_server.schedulers.base import SchedulerBase

class EchoSettings(BaseModel):
    greeting: str = "hello"

class EchoScheduler(SchedulerBase):
    name = "echo"
    settings_model = EchoSettings
    capabilities = Capabilities(gpus=False)

    def __init__(self, settings):
        self.greeting = settings.scheduler.section("echo", EchoSettings).greeting

    @classmethod
    def unpack_command(cls, settings):
        return ["/opt/echo/j2c-unpack"]

    @classmethod
    def native_spec(cls, spec, settings):
        return {"echo": spec.command}
"""

CHECK = """
import json
from j2c_server.config import load_settings
from j2c_server.jobs.send.inputs import job_spec
from j2c_server.schedulers import make_scheduler, scheduler_class, known_backends
settings = load_settings(overrides={"scheduler": {"echo": {"greeting": "hi"}}})
print(json.dumps({
    "known": sorted(known_backends()),
    "greeting": make_scheduler("echo", settings).greeting,
    "unpack": scheduler_class("echo").unpack_command(settings),
}))
"""


def _install_plugin(site: Path) -> None:
    (site / "echo_backend.py").write_text(textwrap.dedent(PLUGIN))
    dist = site / "echo_backend-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: echo-backend\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[j2c.schedulers]\necho = echo_backend:EchoScheduler\n")


def test_a_plugin_package_adds_a_backend_with_its_own_settings(tmp_path: Path) -> None:
    _install_plugin(tmp_path)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.getcwd()}"}
    env = {k: v for k, v in env.items() if not k.startswith("J2C_SCHEDULER")}
    out = subprocess.run(
        [sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, check=True
    )
    answer = json.loads(out.stdout)
    assert "echo" in answer["known"] and "local" in answer["known"]
    assert answer["greeting"] == "hi"
    assert answer["unpack"] == ["/opt/echo/j2c-unpack"]


def test_a_plugins_bad_setting_is_refused_naming_it(tmp_path: Path) -> None:
    _install_plugin(tmp_path)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.getcwd()}"}
    code = CHECK.replace('{"greeting": "hi"}', '{"greeting": ["not", "text"]}')
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode != 0
    assert "scheduler.echo.greeting" in out.stderr


def test_every_built_in_backend_declares_itself() -> None:
    for name in ("local", "slurm", "kubernetes", "container"):
        cls = scheduler_class(name)
        assert cls.name == name
        assert isinstance(
            J2CSettings().scheduler.section(name, cls.settings_model), cls.settings_model
        )
    assert set(known_backends()) >= {"local", "slurm", "kubernetes", "container"}


def test_only_the_local_backend_runs_unpack_with_this_interpreter() -> None:
    settings = J2CSettings()
    assert scheduler_class("local").unpack_command(settings)[0] == sys.executable
    for name in ("slurm", "kubernetes", "container"):
        assert scheduler_class(name).unpack_command(settings) == ["j2c-unpack"]


def test_reserved_names_are_the_scheduler_sections_own_keys() -> None:
    from j2c_server.schedulers import RESERVED_NAMES
    from j2c_server.schedulers.settings import SchedulerSettingsBase

    own = set(SchedulerSettingsBase.model_fields) | {
        name
        for name in vars(SchedulerSettingsBase)
        if not name.startswith("_") and not name.startswith("model_")
    }
    assert own == RESERVED_NAMES


def test_importing_the_settings_or_storage_discovers_no_backend() -> None:
    """Built on the first load: a plug-in importing j2c_server.config finds it complete.
    The settings import the table's package and its ``scheduler.*`` model, no backend."""
    code = (
        "import sys, j2c_server.config, j2c_server.storage\n"
        "print(sorted(m for m in sys.modules if m.startswith('j2c_server.schedulers')))\n"
        "from j2c_server.config import J2CSettings\n"
        "J2CSettings()\n"
        "print('j2c_server.schedulers.slurm.settings' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    table = "['j2c_server.schedulers', 'j2c_server.schedulers.settings']"
    assert out.stdout.split("\n")[:2] == [table, "True"]


def _store_problem(scheduler: str, **section: str) -> str | None:
    from j2c_server.jobs.send.preflight import store_problem

    settings = J2CSettings.model_validate(
        {"storage": {"url": "file:///srv/j2c"}, "scheduler": {"container": section}}
    )
    return store_problem(settings, scheduler)


def test_the_container_backend_says_when_its_uid_cannot_read_a_private_store() -> None:
    problem = _store_problem("container", user=f"{os.getuid() + 1}:0")
    assert problem is not None and f"container jobs run as uid {os.getuid() + 1}" in problem
    assert _store_problem("container", user=f"{os.getuid()}:{os.getgid()}") is None
    assert "slurm jobs run on other machines" in (_store_problem("slurm") or "")
    assert _store_problem("local") is None


def test_an_unknown_scheduler_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(InvalidInput) as info:
        scheduler_class("nosuch")
    assert info.value.field == "scheduler"
    assert "unknown scheduler 'nosuch' (known: container, kubernetes, local, ray, slurm" in str(
        info.value
    )
