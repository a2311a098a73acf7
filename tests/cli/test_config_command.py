"""``j2c config`` and the config file: precedence, unknown keys, masked secrets (subprocesses)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.frontends import RunJ2C


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "j2c.yaml"
    path.write_text(text)
    return path


def test_config_file_value_beats_default(run_j2c: RunJ2C, tmp_path: Path) -> None:
    path = write_config(tmp_path, "pack:\n  compression_level: 5\n")
    result = run_j2c("config", "--config", str(path), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["pack"]["compression_level"] == 5


def test_environment_beats_config_file(run_j2c: RunJ2C, tmp_path: Path) -> None:
    path = write_config(tmp_path, "pack:\n  compression_level: 5\n")
    result = run_j2c(
        "config", "--config", str(path), "--json", env={"J2C_PACK__COMPRESSION_LEVEL": "7"}
    )
    assert json.loads(result.stdout)["pack"]["compression_level"] == 7


def test_config_file_is_found_through_j2c_config(run_j2c: RunJ2C, tmp_path: Path) -> None:
    path = write_config(tmp_path, "scheduler:\n  default: slurm\n")
    result = run_j2c("config", "--json", env={"J2C_CONFIG": str(path)})
    body = json.loads(result.stdout)
    assert body["scheduler"]["default"] == "slurm"
    assert body["config_file"] == str(path.resolve())


def test_unknown_settings_key_exits_2_naming_it(run_j2c: RunJ2C, tmp_path: Path) -> None:
    path = write_config(tmp_path, "storage:\n  bucket_nmae: x\n")
    result = run_j2c("config", "--config", str(path))
    assert result.returncode == 2
    assert "storage.bucket_nmae" in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_job_key_exits_2_naming_it(run_j2c: RunJ2C, tmp_path: Path) -> None:
    path = write_config(tmp_path, "job:\n  gpuz: 2\n")
    result = run_j2c("config", "--config", str(path))
    assert result.returncode == 2
    assert "job.gpuz" in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_key_in_environment_exits_2_naming_it(run_j2c: RunJ2C) -> None:
    result = run_j2c("config", env={"J2C_PACK__LEVEL": "3"})
    assert result.returncode == 2
    assert "pack.level" in result.stderr


def test_missing_config_file_exits_2(run_j2c: RunJ2C, tmp_path: Path) -> None:
    result = run_j2c("config", "--config", str(tmp_path / "absent.yaml"))
    assert result.returncode == 2
    assert "absent.yaml" in result.stderr
    assert "Traceback" not in result.stderr


def test_invalid_yaml_exits_2(run_j2c: RunJ2C, tmp_path: Path) -> None:
    path = write_config(tmp_path, "pack: [unclosed\n")
    result = run_j2c("config", "--config", str(path))
    assert result.returncode == 2
    assert "not valid YAML" in result.stderr


def test_config_masks_the_slurm_token(run_j2c: RunJ2C, tmp_path: Path) -> None:
    path = write_config(tmp_path, "scheduler:\n  slurm:\n    token: eyJ-very-secret\n")
    for args in ((), ("--json",)):
        result = run_j2c("config", "--config", str(path), *args)
        assert result.returncode == 0, result.stderr
        assert "eyJ-very-secret" not in result.stdout
        assert "********" in result.stdout


def test_config_masks_secret_looking_job_env(run_j2c: RunJ2C, tmp_path: Path) -> None:
    path = write_config(tmp_path, "job:\n  env:\n    WANDB_API_KEY: abc123\n    SEED: 1\n")
    result = run_j2c("config", "--config", str(path), "--json")
    env = json.loads(result.stdout)["job"]["env"]
    assert env == {"WANDB_API_KEY": "********", "SEED": "1"}


def test_config_prints_yaml_that_loads_back(run_j2c: RunJ2C, tmp_path: Path) -> None:
    import yaml

    result = run_j2c("config")
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(result.stdout)["scheduler"]["default"] == "local"
