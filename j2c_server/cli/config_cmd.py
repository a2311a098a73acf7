"""``j2c config``: the effective configuration (file < environment), with secrets masked, and
the scheduler backends found: those jobs can use, and each plug-in skipped with why."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import click
import yaml

from j2c_server.cli.options import config_option, json_option, load_cli_config
from j2c_server.config import JOB_SECTION
from j2c_server.schedulers import known_backends, skipped_backends

MASK = "********"
# `env_from_secret` names a Kubernetes Secret; the name is not a secret, so a bare `_secret`
# suffix does not count.
_SECRET_NAME = re.compile(r"^secret$|(^|_)(token|password|secret_key|access_key|api_key)$", re.I)
_SECRET_ENV_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|API_KEY|ACCESS_KEY|PRIVATE_KEY", re.I)


@click.command()
@json_option
@config_option
def config(as_json: bool, config_file: Path | None) -> None:
    """Show the effective configuration: defaults < config file < J2C_* environment."""
    loaded = load_cli_config(config_file)
    effective = mask_secrets(loaded.settings.model_dump(mode="json"))
    if loaded.job:
        job = dict(loaded.job)
        if isinstance(job.get("env"), dict):
            job["env"] = {
                name: MASK if _SECRET_ENV_NAME.search(name) else value
                for name, value in job["env"].items()
            }
        effective[JOB_SECTION] = job
    schedulers = list(known_backends())
    skipped = skipped_backends()
    if as_json:
        found = {"schedulers": schedulers, "skipped_schedulers": skipped}
        click.echo(json.dumps({"config_file": _name(loaded.path), **found, **effective}, indent=2))
        return
    click.echo(f"# config file: {_name(loaded.path) or 'none'}")
    click.echo(f"# data dir: {loaded.settings.data_path()}")
    click.echo(f"# schedulers: {', '.join(schedulers)}")
    for name, why in skipped.items():
        click.echo(f"# scheduler plug-in skipped: {name}: {why}")
    click.echo(yaml.safe_dump(effective, sort_keys=False).rstrip())


def mask_secrets(value: Any) -> Any:
    """A copy with every value under a secret-looking key (``token``, ``password``...) masked."""
    if isinstance(value, dict):
        return {
            key: MASK if _SECRET_NAME.search(str(key)) and item else mask_secrets(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [mask_secrets(item) for item in value]
    return value


def _name(path: Path | None) -> str | None:
    return str(path) if path else None
