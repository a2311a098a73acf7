"""What a send cannot do is said before anything is scanned (#48 e): no image and no default
for the container backend, an image the engine does not have, a root user's ``user: 0:0`` on a
rootful engine. Each was refused only after scan, pack and upload, and left a failed job in
``j2c list``. Now: refused with the one hint that works, nothing packed, no record left; and
``j2c remove`` forgets a finished job as the Compute panel does."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.frontends import RunJ2C
from tests.support.podman import Podman


@pytest.fixture
def container_env(podman: Podman, tmp_path: Path) -> dict[str, str]:
    return {
        "J2C_STORAGE__URL": (tmp_path / "store").as_uri(),
        "J2C_STORAGE__SHARED": "true",
        "J2C_SCHEDULER__DEFAULT": "container",
        "J2C_SCHEDULER__CONTAINER__SOCKET": podman.socket,
    }


def _nothing_sent(run_j2c: RunJ2C, env: dict[str, str], tmp_path: Path) -> None:
    assert json.loads(run_j2c("list", "--json", env=env).stdout) == []
    assert not (tmp_path / "store").exists()  # nothing uploaded
    assert not list((tmp_path / "j2c-data").glob("layers/**/*.tar.zst"))  # nothing packed


def test_no_image_and_no_default_is_refused_before_the_scan(
    run_j2c: RunJ2C, cli_project: Path, container_env: dict[str, str], tmp_path: Path
) -> None:
    env = {**container_env, "JUPYTER_IMAGE": "", "JUPYTER_IMAGE_SPEC": ""}
    sent = run_j2c("submit", "train.py", "--no-venv", cwd=cli_project, env=env)
    assert sent.returncode != 0
    assert "no container image given" in sent.stderr and "--image" in sent.stderr
    assert "scan" not in sent.stderr
    _nothing_sent(run_j2c, env, tmp_path)


def test_an_image_the_engine_lacks_is_refused_before_the_scan(
    run_j2c: RunJ2C, cli_project: Path, container_env: dict[str, str], tmp_path: Path
) -> None:
    missing = "localhost/j2c-no-such-image:1"
    sent = run_j2c(
        "submit", "train.py", "--no-venv", "--image", missing, cwd=cli_project, env=container_env
    )
    assert sent.returncode != 0
    assert f"the container engine has no image {missing!r}" in sent.stderr
    _nothing_sent(run_j2c, container_env, tmp_path)


@pytest.mark.skipif(os.geteuid() != 0, reason="a root user's case: the suite runs as root in CI")
def test_a_root_users_job_as_uid_0_is_refused_before_the_scan_with_the_hint_that_works(
    podman: Podman,
    run_j2c: RunJ2C,
    cli_project: Path,
    container_env: dict[str, str],
    tmp_path: Path,
) -> None:
    env = {**container_env, "J2C_SCHEDULER__CONTAINER__USER": "0:0"}
    sent = run_j2c(
        "submit", "train.py", "--no-venv", "--image", podman.image, cwd=cli_project, env=env
    )
    assert sent.returncode != 0
    assert "scheduler.container.user" in sent.stderr
    _nothing_sent(run_j2c, env, tmp_path)
    # The private store's refusal names only what works for root: storage.shared.
    private = {**container_env, "J2C_STORAGE__SHARED": "false"}
    refused = run_j2c(
        "submit", "train.py", "--no-venv", "--image", podman.image, cwd=cli_project, env=private
    )
    assert "storage.shared: true" in refused.stderr
    assert "to your own uid" not in refused.stderr


def test_j2c_remove_forgets_a_finished_job_and_refuses_one_still_going(
    run_j2c: RunJ2C, cli_project: Path
) -> None:
    done = run_j2c("submit", "train.py", "--no-venv", "--json", cwd=cli_project)
    job_id = json.loads(done.stdout)["id"]
    going = run_j2c(
        "submit",
        "train.py",
        "--no-venv",
        "--no-wait",
        "--json",
        "--",
        "--sleep",
        "30",
        cwd=cli_project,
    )
    going_id = json.loads(going.stdout)["id"]
    refused = run_j2c("remove", going_id)
    assert refused.returncode != 0 and "cancel" in refused.stderr.lower()
    removed = run_j2c("remove", job_id)
    assert removed.returncode == 0, removed.stderr
    ids = {record["id"] for record in json.loads(run_j2c("list", "--json").stdout)}
    assert job_id not in ids and going_id in ids
    run_j2c("cancel", going_id)
