"""``scheduler.container.*`` settings: which engine socket is used, and what is refused."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from j2c_server.config import load_settings
from j2c_server.core.errors import ConfigError
from j2c_server.schedulers.container.backend import ContainerScheduler
from j2c_server.schedulers.container.settings import ContainerSettings
from tests.support.podman import Podman


def _container(**values: object) -> ContainerSettings:
    settings = load_settings(environ={}, overrides={"scheduler": {"container": values}})
    return settings.scheduler.section("container", ContainerSettings)


def test_a_unix_url_is_a_socket_path_and_other_schemes_are_refused() -> None:
    assert _container(socket="unix:///run/x/engine.sock").socket_path({}) == "/run/x/engine.sock"
    assert _container(socket="/run/x/engine.sock").socket_path({}) == "/run/x/engine.sock"
    for bad in ("tcp://10.0.0.1:2375", "ssh://me@host", "relative.sock"):
        with pytest.raises(ConfigError) as info:
            _container(socket=bad)
        assert info.value.field == "scheduler.container.socket"
        assert "is not a unix socket" in info.value.message and bad in info.value.message


def test_unset_it_follows_docker_host_then_container_host(tmp_path: Path) -> None:
    cfg = _container()
    both = {"DOCKER_HOST": "unix:///d.sock", "CONTAINER_HOST": "unix:///c.sock"}
    assert cfg.socket_path(both) == "/d.sock"
    assert cfg.socket_path({"CONTAINER_HOST": "unix:///c.sock"}) == "/c.sock"
    # The setting wins over the environment.
    assert _container(socket="/s.sock").socket_path(both) == "/s.sock"
    with pytest.raises(ConfigError) as info:
        cfg.socket_path({"DOCKER_HOST": "tcp://127.0.0.1:2375"})
    assert "$DOCKER_HOST" in info.value.message and "tcp://127.0.0.1:2375" in info.value.message
    assert info.value.field == "scheduler.container.socket"


def test_unset_and_no_env_it_is_the_first_usual_socket_that_exists(tmp_path: Path) -> None:
    cfg = _container()
    runtime = tmp_path / "run-user"
    (runtime / "podman").mkdir(parents=True)
    (runtime / "podman" / "podman.sock").touch()
    env = {"XDG_RUNTIME_DIR": str(runtime)}
    if Path("/run/podman/podman.sock").exists():
        pytest.skip("this machine has a rootful podman socket, which comes first")
    assert cfg.socket_path(env) == f"{runtime}/podman/podman.sock"
    (runtime / "podman" / "podman.sock").unlink()
    expected = "/var/run/docker.sock" if Path("/var/run/docker.sock").exists() else None
    assert cfg.socket_path(env) == (expected or "/run/podman/podman.sock")


def test_a_unix_url_from_docker_host_reaches_the_engine(
    podman: Podman, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{podman.socket}")
    monkeypatch.delenv("CONTAINER_HOST", raising=False)
    settings = load_settings(
        environ={}, overrides={"data_dir": str(tmp_path / "data"), "default_image": podman.image}
    )
    scheduler = ContainerScheduler(settings)

    async def go() -> None:
        # A container the engine does not have: None, not "cannot reach the container engine".
        assert await scheduler._api().inspect("j2c-" + "f" * 20) is None
        await scheduler.close()

    asyncio.run(go())
