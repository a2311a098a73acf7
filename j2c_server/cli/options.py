"""The submit options, defined once for the CLI and the magic, and the config file they read.

A config file holds job parameters under ``job:`` (the fields of :class:`JobRequest`; resource
fields may also sit directly under ``job:``) next to the settings sections (``storage``,
``scheduler``, ``pack``, ...). Each job parameter is taken from, lowest first: the front end's
defaults (``j2c_server.jobs.send.proposal``: project folder, venv), the config file, ``J2C_JOB__*``
environment variables, then flags. Relative ``code_path``/``venv_path`` in the file are relative
to the file's folder, elsewhere to the current directory. A relative entry point follows one
rule wherever it is typed (:func:`j2c_server.jobs.paths.resolve_call_path`):
inside the project,
or relative to where it was typed when that lies inside the project and the file exists there.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import click
import yaml
from pydantic import ValidationError

from j2c_server.config import (
    JOB_SECTION,
    J2CSettings,
    default_config_file,
    env_overrides,
    load_settings,
    read_config_file,
)
from j2c_server.core.errors import ConfigError, InvalidInput, validation_error_to_j2c
from j2c_server.jobs.paths import resolve_call_path
from j2c_server.jobs.send.proposal import choose_venv, environ_venv, project_root
from j2c_server.wire.api import JobRequest, Resources

F = TypeVar("F", bound=Callable[..., Any])

RESOURCE_KEYS = frozenset(Resources.model_fields)
JOB_KEYS = frozenset(JobRequest.model_fields) | RESOURCE_KEYS
_PATH_KEYS = ("code_path", "venv_path")
# Where a layer's relative call_path was typed; resolved once the project is known.
CALL_FROM = "_call_from"
# Why the defaults layer proposes its venv (shown when no other layer names one).
VENV_REASON = "_venv_reason"


def find_project_root(start: Path) -> Path:
    """The project folder around ``start`` (:func:`j2c_server.jobs.send.proposal.project_root`)."""
    return project_root(start)


# --------------------------------------------------------------------------- config file


@dataclass
class CliConfig:
    """The effective settings plus the job parameters the file and the environment give."""

    settings: J2CSettings
    job: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None


def load_cli_config(
    config_file: Path | None = None, environ: Mapping[str, str] | None = None
) -> CliConfig:
    environ = dict(os.environ) if environ is None else dict(environ)
    path = config_file if config_file is not None else default_config_file()
    job: dict[str, Any] = {}
    if path is not None:
        path = path.expanduser().resolve()
        raw = read_config_file(path).get(JOB_SECTION) or {}
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: job: must be a mapping", field=JOB_SECTION)
        job = _job_layer(raw, source=str(path), base_dir=path.parent)
    env_job = env_overrides(environ).get(JOB_SECTION) or {}
    if env_job:
        parsed = {key: _parse_env_value(value) for key, value in env_job.items()}
        job = merge_job(job, _job_layer(parsed, source="environment", base_dir=Path.cwd()))
    settings = load_settings(config_file=path, environ=environ)
    return CliConfig(settings=settings, job=job, path=path)


def _parse_env_value(value: Any) -> Any:
    # Lists and mappings (args, env, excludes) are written as JSON; everything else stays a string
    # and pydantic coerces it.
    if isinstance(value, str) and value[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"environment: {value!r} is not valid JSON: {exc.msg}") from None
    return value


def _job_layer(raw: Mapping[str, Any], *, source: str, base_dir: Path | None) -> dict[str, Any]:
    """One source's job parameters in :class:`JobRequest`'s shape, paths made absolute."""
    out: dict[str, Any] = {}
    resources: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in JOB_KEYS:
            known = ", ".join(sorted(JOB_KEYS))
            raise ConfigError(
                f"{source}: job.{key}: unknown key (known: {known})", field=f"job.{key}"
            )
        if key == "resources":
            if not isinstance(value, dict):
                raise ConfigError(f"{source}: job.resources: must be a mapping", field=key)
            resources.update(value)
        elif key in RESOURCE_KEYS:
            resources[key] = value
        else:
            out[key] = _stringify_scalars(value) if key in ("args", "env") else value
    if resources:
        out["resources"] = resources
    if base_dir is not None:
        for key in _PATH_KEYS:
            if isinstance(out.get(key), str):
                out[key] = absolute_path(out[key], base_dir)
        if isinstance(out.get("call_path"), str):
            out[CALL_FROM] = str(base_dir)
    return out


def _stringify_scalars(value: Any) -> Any:
    # YAML reads `--epochs 3` or `SEED: 1` as numbers; arguments and variables are strings.
    def text(item: Any) -> Any:
        return str(item) if isinstance(item, int | float) and not isinstance(item, bool) else item

    if isinstance(value, list):
        return [text(item) for item in value]
    if isinstance(value, dict):
        return {key: text(item) for key, item in value.items()}
    return value


def absolute_path(value: str, base_dir: Path) -> str:
    """Resolve a user path; ``-m package.module`` entry points pass through unchanged."""
    if value.startswith("-m ") or value.startswith("-m\t"):
        return value
    path = Path(value).expanduser()
    return str(path if path.is_absolute() else (base_dir / path).resolve())


def merge_job(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """Later sources win per key; ``resources`` and ``env`` merge key by key, lists replace."""
    out = dict(base)
    for key, value in extra.items():
        if key in ("resources", "env") and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


# --------------------------------------------------------------------------- options

config_option = click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="YAML config file (default: $J2C_CONFIG, else j2c.yaml in the Jupyter config dir).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
verbose_option = click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="j2c's whole diary: every stage and every line of j2c's in the job.",
)


def submit_options(func: F) -> F:
    """Every ``j2c submit`` / ``%j2c submit`` option, applied in one place."""
    decorators = [
        click.argument("entry", required=False),
        click.option("--code-path", type=click.Path(file_okay=False), help="Project folder."),
        click.option(
            "--call-path",
            help="Entry point: a .py script or .ipynb notebook in the project, or '-m module'.",
        ),
        click.option(
            "-m",
            "--module",
            metavar="MODULE",
            help="Entry point: run MODULE as `python -m MODULE` (like python's own -m).",
        ),
        click.option("--venv-path", type=click.Path(file_okay=False), help="Venv to ship."),
        click.option("--no-venv", is_flag=True, help="Ship no venv, even if one is active."),
        click.option("--image", help="Container image (default: this lab's image)."),
        click.option("--gpus", type=click.IntRange(0), help="Number of GPUs."),
        click.option("--cpus", type=click.FloatRange(0, min_open=True), help="CPU cores."),
        click.option("--memory", help="Memory, e.g. 16Gi."),
        click.option("--gpu-type", help="GPU model, where the cluster offers several."),
        click.option("--time-limit", type=click.IntRange(1), help="Wall-clock limit in minutes."),
        click.option(
            "--nodes", type=click.IntRange(1), help="Nodes to run on (GPUs etc. are per node)."
        ),
        click.option(
            "--launcher",
            type=click.Choice(["none", "torchrun"]),
            help="torchrun: start the entry point under torchrun on every node.",
        ),
        click.option("--scheduler", help="Scheduler backend (default from the configuration)."),
        click.option("--compression-level", type=click.IntRange(1, 22), help="zstd level."),
        click.option("--exclude", multiple=True, help="Extra gitignore pattern (repeatable)."),
        click.option(
            "--include", multiple=True, help="Ship a path excluded as a secret (repeatable)."
        ),
        click.option("--env", "env_pairs", multiple=True, help="K=V for the job (repeatable)."),
        click.option("--name", help="Display name."),
        click.option(
            "--no-ship-base",
            is_flag=True,
            help="Ship none of the lab's base packages the image lacks (pack.ship_base_packages).",
        ),
        click.option(
            "--base-conflicts",
            type=click.Choice(["auto", "ship", "image"]),
            help="A needed lab-base package the image has at another version: ship the lab's, "
            "use the image's, or auto (the lab's where the image's fails a requirement).",
        ),
        click.option(
            "--force-base",
            is_flag=True,
            help="Ship the lab's versions even where they fail the image's own requirements.",
        ),
        click.option(
            "--allow-missing-imports",
            is_flag=True,
            help="Send even when the entry's code imports what neither the venv, the lab nor "
            "the image provides (the check before upload names them).",
        ),
        click.option(
            "--sweep",
            "sweep_pairs",
            multiple=True,
            help="NAME=V1,V2,...: run one variant per value, '{NAME}' replaced in the args and "
            "env (repeatable: the cross product). One upload for every variant.",
        ),
        click.option(
            "--sweep-file",
            type=click.Path(dir_okay=False, exists=True),
            help="YAML file with the sweep (grid: or variants:, env:, max_parallel:).",
        ),
        click.option(
            "--max-parallel", type=click.IntRange(1), help="A sweep's variants at once, at most."
        ),
        click.option(
            "--retries",
            type=click.IntRange(0),
            help="Re-run a sweep's variant that exits non-zero, up to this many times.",
        ),
        click.option(
            "--max-attempts",
            type=click.IntRange(0),
            help="Run again this many times at most after a preemption or a lost node, each "
            "time from the last synced checkpoint (0: never; default resume.max_attempts).",
        ),
        click.option(
            "--checkpoint-dir",
            "checkpoint_dirs",
            multiple=True,
            help="A folder (relative to the working directory) the job writes checkpoints to: "
            "synced while it runs, restored when it resumes (repeatable; default "
            "resume.checkpoint_dirs, checkpoints/).",
        ),
        config_option,
        click.option("--new", is_flag=True, help="Run again even if an identical job exists."),
        click.option("--no-wait", is_flag=True, help="Print the job id and return at once."),
        click.option("--dry-run", is_flag=True, help="Print the job spec; submit nothing."),
        verbose_option,
        json_option,
    ]
    for decorator in reversed(decorators):
        func = decorator(func)
    return func


class SubmitCommand(click.Command):
    """Everything after ``--`` belongs to the job's entry point, never to j2c."""

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        return [*super().collect_usage_pieces(ctx), "[-- ARGS...]"]

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            cut = args.index("--")
            ctx.meta["j2c.script_args"] = args[cut + 1 :]
            args = args[:cut]
        else:
            ctx.meta["j2c.script_args"] = []
        return super().parse_args(ctx, args)


def script_args(ctx: click.Context) -> list[str]:
    args: list[str] = ctx.meta.get("j2c.script_args", [])
    return args


def flags_layer(params: Mapping[str, Any], args: Sequence[str], cwd: Path) -> dict[str, Any]:
    """The job parameters given as flags (only those given), in :class:`JobRequest`'s shape."""
    module = params.get("module")
    given = [
        str(value)
        for value in (params.get("entry"), params.get("call_path"), module and f"-m {module}")
        if value
    ]
    if len(given) > 1:
        raise InvalidInput(
            f"give the entry point once: {' or '.join(map(repr, given))}", field="call_path"
        )
    out: dict[str, Any] = {}
    for key in ("code_path", "venv_path"):
        if params.get(key):
            out[key] = absolute_path(str(params[key]), cwd)
    if given:
        out["call_path"] = given[0]
        out[CALL_FROM] = str(cwd)
    if params.get("no_venv"):
        if params.get("venv_path"):
            raise InvalidInput("--no-venv and --venv-path contradict", field="venv_path")
        out["venv_path"] = None
    for key in ("image", "scheduler", "compression_level", "name"):
        if params.get(key) is not None:
            out[key] = params[key]
    resources = {
        name: params[flag]
        for name, flag in (
            ("gpus", "gpus"),
            ("cpus", "cpus"),
            ("memory", "memory"),
            ("gpu_type", "gpu_type"),
            ("time_limit_minutes", "time_limit"),
            ("nodes", "nodes"),
            ("launcher", "launcher"),
        )
        if params.get(flag) is not None
    }
    if resources:
        out["resources"] = resources
    if params.get("exclude"):
        out["excludes"] = list(params["exclude"])
    if params.get("include"):
        out["includes"] = list(params["include"])
    if params.get("env_pairs"):
        out["env"] = parse_env_pairs(params["env_pairs"])
    if args:
        out["args"] = list(args)
    if params.get("new"):
        out["new"] = True
    if params.get("no_ship_base"):
        out["ship_base"] = False
    if params.get("base_conflicts"):
        out["base_conflicts"] = params["base_conflicts"]
    if params.get("force_base"):
        out["force_base"] = True
    if params.get("allow_missing_imports"):
        out["allow_missing_imports"] = True
    if params.get("max_attempts") is not None:
        out["max_attempts"] = params["max_attempts"]
    if params.get("checkpoint_dirs"):
        out["checkpoint_dirs"] = list(params["checkpoint_dirs"])
    sweep = sweep_layer(params)
    if sweep:
        out["sweep"] = sweep
    return out


def _strings_deep(value: Any) -> Any:
    # A sweep file's values become arguments and variables: strings (YAML reads 1e-3 as a number).
    if isinstance(value, dict):
        return {key: _strings_deep(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_strings_deep(item) for item in value]
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


def sweep_layer(params: Mapping[str, Any]) -> dict[str, Any]:
    """``--sweep-file``, then ``--sweep NAME=V1,V2`` grid entries over it, then
    ``--max-parallel`` and ``--retries``: the request's ``sweep`` (validated with the request)."""
    sweep: dict[str, Any] = {}
    if params.get("sweep_file"):
        path = Path(str(params["sweep_file"]))
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise InvalidInput(f"--sweep-file {path}: {exc}", field="sweep") from None
        if not isinstance(loaded, dict):
            raise InvalidInput(
                f"--sweep-file {path}: expected a mapping (grid:, variants:, env:)", field="sweep"
            )
        sweep = _strings_deep(loaded)
    for pair in params.get("sweep_pairs") or ():
        name, sep, values = pair.partition("=")
        if not sep or not name or not values:
            raise InvalidInput(f"--sweep {pair!r}: expected NAME=V1,V2,...", field="sweep")
        sweep.setdefault("grid", {})[name] = values.split(",")
    if params.get("max_parallel") is not None:
        if not sweep:
            raise InvalidInput("--max-parallel applies to a sweep: give --sweep", field="sweep")
        sweep["max_parallel"] = params["max_parallel"]
    if params.get("retries"):
        if not sweep:
            raise InvalidInput("--retries applies to a sweep: give --sweep", field="sweep")
        sweep["retries"] = params["retries"]
    return sweep


def parse_env_pairs(pairs: Sequence[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise InvalidInput(f"--env {pair!r}: expected NAME=VALUE", field="env")
        env[name] = value
    return env


def build_request(*layers: Mapping[str, Any]) -> JobRequest:
    """Merge the layers (lowest first) and validate them into one request."""
    merged: dict[str, Any] = {}
    for layer in layers:
        merged = merge_job(merged, layer)
    typed_from = merged.pop(CALL_FROM, None)
    merged.pop(VENV_REASON, None)
    for key, flag in (("code_path", "--code-path"), ("call_path", "an entry point")):
        if not merged.get(key):
            raise InvalidInput(
                f"{key} is missing: give {flag}, or set job.{key} in the config file",
                field=key,
            )
    merged["call_path"] = resolve_call_path(
        str(merged["call_path"]),
        Path(str(merged["code_path"])),
        Path(typed_from) if typed_from else None,
    )
    try:
        return JobRequest.model_validate(merged)
    except ValidationError as exc:
        raise validation_error_to_j2c(exc, default_field="request") from None


def cli_defaults(cwd: Path, environ: Mapping[str, str]) -> dict[str, Any]:
    """What a plain ``j2c submit`` ships: the project around ``cwd`` and the venv the common
    rule picks (the active one, else the project's own)."""
    project = project_root(cwd)
    venv = choose_venv(project, active_venv=environ_venv(environ))
    defaults: dict[str, Any] = {"code_path": str(project), VENV_REASON: venv.reason}
    if venv.path is not None:
        defaults["venv_path"] = str(venv.path)
    return defaults


def default_venv_note(defaults: Mapping[str, Any], *layers: Mapping[str, Any]) -> str | None:
    """Why the defaults' venv is shipped (or none is), when no later layer names the venv."""
    if any("venv_path" in layer for layer in layers):
        return None
    reason = defaults.get(VENV_REASON)
    return f"venv: {reason}" if isinstance(reason, str) else None
