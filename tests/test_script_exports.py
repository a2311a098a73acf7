"""Every ``J2C_*`` variable the scripts export or set is either a settings key (``J2C_A__B``) or
one the settings loader leaves alone: `eval "$(scripts/ray-up.sh DIR)"` followed by
``j2c submit`` once failed with "settings: ray_dir: Extra inputs are not permitted"."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from j2c_server.config import ENV_DELIMITER, J2CSettings, env_overrides
from j2c_server.schedulers.ray.settings import RaySettings

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
NAME = re.compile(r"\b(J2C_[A-Z0-9_]+)=")


def _names() -> list[str]:
    found = {m for path in SCRIPTS.glob("*.sh") for m in NAME.findall(path.read_text())}
    return sorted(found)


def test_the_scripts_export_some() -> None:
    assert {"J2C_RAY_DIR", "J2C_SCHEDULER__RAY__ADDRESS", "J2C_SLURM_DIR"} <= set(_names())


@pytest.mark.parametrize("name", [n for n in _names() if ENV_DELIMITER not in n])
def test_a_plain_name_is_not_read_as_a_setting(name: str) -> None:
    assert env_overrides({name: "1"}) == {}


def test_settings_load_beside_what_ray_up_exports() -> None:
    exported = {
        "J2C_SCHEDULER__RAY__ADDRESS": "http://127.0.0.1:8265",
        "J2C_RAY_GCS": "127.0.0.1:6379",
        "J2C_RAY_BIN": "/opt/ray/bin",
        "J2C_RAY_DIR": "/tmp/head",
    }
    settings = J2CSettings.model_validate(env_overrides(exported))
    assert settings.scheduler.section("ray", RaySettings).address == "http://127.0.0.1:8265"
