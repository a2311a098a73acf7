"""Operator-locked settings (``locked:`` in the system j2c.yaml): a user's file, ``$J2C_CONFIG``,
``J2C_*`` or overrides that set a locked key is an error naming the key and the file that locked
it. A guardrail (the user owns the server process), tested as one."""

from __future__ import annotations

from pathlib import Path

import pytest

from j2c_server.config import load_settings
from j2c_server.core import config_locks
from j2c_server.core.errors import ConfigError
from j2c_server.schedulers.container.engine import EngineInfo, unsafe_settings
from j2c_server.schedulers.container.settings import ContainerSettings

OPERATOR = """
locked:
  - scheduler.kubernetes.namespace
  - scheduler.kubernetes.env_from_secret
  - scheduler.pass_env
scheduler:
  kubernetes:
    namespace: j2c-jobs
"""


@pytest.fixture
def operator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "etc-jupyter"
    folder.mkdir()
    (folder / "j2c.yaml").write_text(OPERATOR)
    monkeypatch.setattr(config_locks, "OPERATOR_DIRS", [folder])
    return folder / "j2c.yaml"


def _user_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "user-j2c.yaml"
    path.write_text(text)
    return path


def test_a_user_file_that_sets_a_locked_key_is_refused_naming_key_and_lock(
    operator: Path, tmp_path: Path
) -> None:
    user = _user_file(tmp_path, "scheduler:\n  kubernetes:\n    env_from_secret: hub\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(config_file=user, environ={})
    assert "scheduler.kubernetes.env_from_secret" in caught.value.message
    assert str(operator) in caught.value.message and str(user) in caught.value.message


def test_a_j2c_variable_that_sets_a_locked_key_is_refused(operator: Path) -> None:
    with pytest.raises(ConfigError, match="J2C_SCHEDULER__KUBERNETES__NAMESPACE"):
        load_settings(environ={"J2C_SCHEDULER__KUBERNETES__NAMESPACE": "hub"})


def test_overrides_and_a_whole_section_above_a_lock_are_refused(operator: Path) -> None:
    with pytest.raises(ConfigError, match=r"scheduler\.pass_env"):
        load_settings(environ={}, overrides={"scheduler": {"pass_env": ["HUB_TOKEN"]}})
    user = operator.parent.parent / "u.yaml"
    user.write_text("scheduler:\n  kubernetes: null\n")
    with pytest.raises(ConfigError, match="locked by the operator"):
        load_settings(config_file=user, environ={})


def test_locked_keys_take_the_operators_value_even_when_j2c_config_skips_its_file(
    operator: Path, tmp_path: Path
) -> None:
    user = _user_file(tmp_path, "scheduler:\n  kubernetes:\n    context: mine\n")
    settings = load_settings(config_file=user, environ={})
    kube = settings.scheduler.kubernetes  # type: ignore[attr-defined]
    assert kube.namespace == "j2c-jobs" and kube.context == "mine"  # unlocked keys stay theirs
    assert kube.env_from_secret is None  # locked and unset by the operator: the default


def test_the_operators_own_file_sets_locked_keys(operator: Path) -> None:
    settings = load_settings(config_file=operator, environ={})
    assert settings.scheduler.kubernetes.namespace == "j2c-jobs"  # type: ignore[attr-defined]


def test_locked_in_a_users_file_is_refused(operator: Path, tmp_path: Path) -> None:
    user = _user_file(tmp_path, "locked: []\n")
    with pytest.raises(ConfigError, match="read only from the operator's file"):
        load_settings(config_file=user, environ={})


def test_a_malformed_lock_list_is_a_clear_error(operator: Path) -> None:
    operator.write_text("locked: scheduler.pass_env\n")
    with pytest.raises(ConfigError, match="list of dotted setting keys"):
        load_settings(environ={})


def test_without_an_operator_file_nothing_is_locked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(config_locks, "OPERATOR_DIRS", [tmp_path / "none"])
    settings = load_settings(environ={"J2C_SCHEDULER__KUBERNETES__NAMESPACE": "mine"})
    assert settings.scheduler.kubernetes.namespace == "mine"  # type: ignore[attr-defined]


def test_a_backend_sees_what_the_operator_locked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The container backend lets a rootful engine run what the operator set and locked (root,
    host network) and refuses the same settings from a user's own file."""
    folder = tmp_path / "etc-jupyter"
    folder.mkdir()
    (folder / "j2c.yaml").write_text(
        "locked: [scheduler.container]\nscheduler:\n  container:\n    user: '0:0'\n"
        "    network: host\n"
    )
    monkeypatch.setattr(config_locks, "OPERATOR_DIRS", [folder])
    settings = load_settings(config_file=folder / "j2c.yaml", environ={})
    assert settings.is_locked("scheduler.container.user")
    assert not settings.is_locked("scheduler.slurm.url")
    cfg = settings.scheduler.section("container", ContainerSettings)
    rootful = EngineInfo(podman=True, rootless=False)
    assert unsafe_settings(cfg, rootful, settings.is_locked, home=tmp_path) == []
    # The same settings from a user's file, nothing locked: refused on a rootful engine.
    monkeypatch.setattr(config_locks, "OPERATOR_DIRS", [])
    user = _user_file(tmp_path, "scheduler:\n  container:\n    user: '0:0'\n    network: host\n")
    mine = load_settings(config_file=user, environ={})
    assert not mine.is_locked("scheduler.container.user")
    assert len(unsafe_settings(cfg, rootful, mine.is_locked, home=tmp_path)) == 2
