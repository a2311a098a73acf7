"""Environment variables → settings: names are case-insensitive, a mapping's keys keep case."""

from __future__ import annotations

from j2c_server.cli.options import load_cli_config
from j2c_server.config import env_overrides, load_settings


def test_slurm_env_keys_keep_their_case() -> None:
    settings = load_settings(
        environ={
            "J2C_SCHEDULER__SLURM__ENV__PATH": "/opt/j2c/bin:/usr/bin",
            "J2C_SCHEDULER__SLURM__ENV__LD_LIBRARY_PATH": "/opt/lib",
            "J2C_SCHEDULER__SLURM__URL": "http://slurm:6820",
        }
    )
    assert settings.scheduler.slurm.env == {
        "PATH": "/opt/j2c/bin:/usr/bin",
        "LD_LIBRARY_PATH": "/opt/lib",
    }
    assert settings.scheduler.slurm.url == "http://slurm:6820"


def test_setting_names_stay_case_insensitive() -> None:
    assert env_overrides({"J2C_Storage__URL": "file:///x"}) == {"storage": {"url": "file:///x"}}


def test_kubernetes_node_selector_keys_keep_their_case() -> None:
    settings = load_settings(environ={"J2C_SCHEDULER__KUBERNETES__NODE_SELECTOR__GpuType": "A"})
    assert settings.scheduler.kubernetes.node_selector == {"GpuType": "A"}


def test_job_env_keys_keep_their_case() -> None:
    job = load_cli_config(None, environ={"J2C_JOB__ENV__HF_HOME": "/data/hf"}).job
    assert job["env"] == {"HF_HOME": "/data/hf"}


def test_the_server_root_for_kernels_is_not_a_setting() -> None:
    assert env_overrides({"J2C_SERVER_ROOT": "/home/ada"}) == {}
