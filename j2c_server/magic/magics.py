"""``%j2c`` and ``%%j2c``: submit from a notebook and watch the job in the cell's output.

The options are the CLI's (``j2c_server.cli.options``), parsed by the same click commands; only
the defaults differ: the notebook's project folder, the kernel's venv and the notebook itself as
the entry point. A kernel's event loop is busy running the cell, so the job service runs on a
thread of its own with its own loop and the cell talks to it through
``asyncio.run_coroutine_threadsafe``.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from j2c_server.cli import commands
from j2c_server.cli import jobs as cli_jobs
from j2c_server.cli.commands import LogPrinter, Streams
from j2c_server.cli.options import (
    VENV_REASON,
    build_request,
    default_venv_note,
    flags_layer,
    load_cli_config,
    script_args,
)
from j2c_server.cli.session import resolve_job
from j2c_server.cli.submit import submit as submit_command
from j2c_server.core.errors import InvalidInput, J2CError
from j2c_server.image.text import report_lines
from j2c_server.jobs.send.proposal import choose_venv, project_root
from j2c_server.magic.runtime import (
    BackgroundService,
    CellView,
    Job,
    announce_end,
    background_service,
    watch,
)

if TYPE_CHECKING:
    pass

CELLS_DIR = Path(".j2c") / "cells"
_USAGE = (
    "usage: %j2c submit [OPTIONS] [ENTRY] [-- ARGS...] | status JOB | logs JOB [-f] "
    "| cancel JOB | list | results JOB [--copy DIR] | sweep status SWEEP [--json]\n"
    "       %%j2c [OPTIONS] [-- ARGS...]  (the cell is the entry point)"
)


# --------------------------------------------------------------------------- defaults


def notebook_defaults(
    cwd: Path,
    user_ns: Mapping[str, Any],
    environ: Mapping[str, str],
    kernel_prefix: Path | None = None,
) -> dict[str, Any]:
    """The project around the notebook, the venv the common rule picks for this kernel
    (``j2c_server.jobs.send.proposal``, the UI form's rule too), and the notebook as entry point."""
    if kernel_prefix is None and sys.prefix != sys.base_prefix:
        kernel_prefix = Path(sys.prefix)
    root = server_root(environ)
    project = project_root(cwd, root if root is not None and cwd.is_relative_to(root) else None)
    venv = choose_venv(project, root=root, kernel_prefix=kernel_prefix)
    defaults: dict[str, Any] = {"code_path": str(project), VENV_REASON: venv.reason}
    if venv.path is not None:
        defaults["venv_path"] = str(venv.path)
    notebook = notebook_path(cwd, user_ns, environ)
    if notebook is not None:
        defaults["call_path"] = str(notebook)
    return defaults


def server_root(environ: Mapping[str, str]) -> Path | None:
    """The Jupyter server's root folder, when the kernel's environment names it.

    A kernel cannot see the server's ``root_dir``; ``J2C_SERVER_ROOT`` (exported by whoever
    starts the server, or by the server for its kernels) or JupyterHub's ``JUPYTERHUB_ROOT_DIR``
    say it. Without one the project is the boundary of the venv rule.
    """
    for name in ("J2C_SERVER_ROOT", "JUPYTERHUB_ROOT_DIR"):
        value = environ.get(name)
        if value and Path(value).expanduser().is_dir():
            return Path(value).expanduser().resolve()
    return None


def notebook_path(cwd: Path, user_ns: Mapping[str, Any], environ: Mapping[str, str]) -> Path | None:
    """The notebook this kernel runs, as Jupyter tells the kernel (``__session__``)."""
    name = user_ns.get("__session__") or environ.get("JPY_SESSION_NAME")
    if not isinstance(name, str) or not name.endswith(".ipynb"):
        return None
    path = Path(name).expanduser()
    path = path if path.is_absolute() else cwd / path
    return path.resolve() if path.is_file() else None


def write_cell(code_path: Path, cwd: Path, source: str) -> Path:
    """Save a cell as ``.j2c/cells/cell-<hash>.py`` in the project, running where the cell ran."""
    workdir = os.path.relpath(cwd.resolve(), code_path.resolve())
    if workdir.startswith(".."):
        raise InvalidInput(
            f"the notebook's folder {cwd} is outside the project {code_path}", field="code_path"
        )
    header = (
        "# Written by %%j2c from a notebook cell; runs in the notebook's folder like the cell.\n"
        "import os as _j2c_os\n"
        "import pathlib as _j2c_pathlib\n\n"
        f"_j2c_os.chdir(_j2c_pathlib.Path(__file__).resolve().parents[2] / {workdir!r})\n\n"
    )
    text = header + source.rstrip() + "\n"
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    target = code_path / CELLS_DIR / f"cell-{digest}.py"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".tmp")
        partial.write_text(text)
        partial.replace(target)
    return target


# --------------------------------------------------------------------------- the magics


def parse(command: click.Command, name: str, args: list[str]) -> click.Context | None:
    """Parse ``args`` with the CLI's own command; None when it only printed help."""
    try:
        return command.make_context(name, args)
    except click.exceptions.Exit:
        return None
    except click.ClickException as exc:
        raise _usage_error(exc.format_message()) from None


def _usage_error(message: str) -> Exception:
    from IPython.core.error import UsageError

    return UsageError(message)


def run_line(line: str, shell: Any, cell: str | None = None) -> Any:
    try:
        argv = shlex.split(line)
    except ValueError as exc:  # e.g. an unclosed quote
        raise _usage_error(f"j2c: {exc}") from None
    try:
        return _dispatch(argv, shell, cell)
    except J2CError as exc:
        raise _usage_error(f"j2c: {exc}") from None


def _dispatch(argv: list[str], shell: Any, cell: str | None) -> Any:
    if cell is not None:
        return _submit(["submit", *argv], shell, cell)
    if not argv:
        print(_USAGE)
        return None
    command, rest = argv[0], argv[1:]
    if command in ("submit", "pack"):
        return _submit(argv, shell, None)
    handlers = {
        "status": _status,
        "logs": _logs,
        "cancel": _cancel,
        "list": _list,
        "results": _results,
        "sweep": _sweep,
    }
    if command not in handlers:
        raise _usage_error(f"j2c: unknown command {command!r}\n{_USAGE}")
    return handlers[command](rest)


def _submit(argv: list[str], shell: Any, cell: str | None) -> Job | dict[str, Any] | None:
    if os.environ.get("J2C_JOB_ID"):
        # This notebook is itself running as a j2c job: run cells here, never submit again.
        if cell is not None:
            shell.run_cell(cell)
        else:
            print(f"j2c: running as job {os.environ['J2C_JOB_ID']}; not submitting again.")
        return None
    ctx = parse(submit_command, f"%j2c {argv[0]}", argv[1:])
    if ctx is None:
        return None
    params = ctx.params
    config = load_cli_config(params["config_file"])
    cwd = Path.cwd()
    flags = flags_layer(params, script_args(ctx), cwd)
    defaults = notebook_defaults(cwd, shell.user_ns, os.environ)
    if cell is not None:
        if "call_path" in flags:
            raise InvalidInput("%%j2c runs the cell: give no entry point", field="call_path")
        code_path = Path(
            flags.get("code_path") or config.job.get("code_path") or defaults["code_path"]
        )
        cell_file = write_cell(code_path, cwd, cell)
        flags["call_path"] = str(cell_file)
        # Named in ``includes`` so that a .gitignore listing .j2c/ cannot leave it behind.
        includes = flags.get("includes") or config.job.get("includes") or []
        flags["includes"] = [*includes, cell_file.relative_to(code_path).as_posix()]
    request = build_request(defaults, config.job, flags)
    note = default_venv_note(defaults, config.job, flags)
    if note:
        print(f"j2c: {note}")  # j2c's own lines never go to stderr for a job that is fine
    runner = background_service(config.settings)
    if params["dry_run"]:
        for line in report_lines(runner.call(runner.service.image_report(request))):
            print(f"j2c: {line}")
        spec: dict[str, Any] = runner.call(runner.service.dry_run(request))
        return spec
    record = runner.call(runner.service.submit(request))
    if record.decision is not None:
        print(f"j2c: job {record.id} ({record.name}): {record.decision.message}")
    runner.jobs.add(record.id)
    job = Job(runner, record.id)
    if params["no_wait"]:
        print(f"j2c: job {record.id} submitted; follow it with `%j2c logs -f {record.id}`")
        announce_end(runner, record)
        return job
    watch(runner, record.id, verbose=params["verbose"], name=record.name)
    return job


def _service_for(ctx: click.Context) -> BackgroundService:
    return background_service(load_cli_config(ctx.params.get("config_file")).settings)


def _status(args: list[str]) -> None:
    ctx = parse(cli_jobs.status, "%j2c status", args)
    if ctx is not None:
        runner = _service_for(ctx)
        record = runner.call(commands.status(runner.service, ctx.params["job"]))
        commands.render_status(record, as_json=ctx.params["as_json"], streams=Streams.std())


def _logs(args: list[str]) -> None:
    ctx = parse(cli_jobs.logs, "%j2c logs", args)
    if ctx is None:
        return
    runner, ref, after = _service_for(ctx), ctx.params["job"], ctx.params["after"]
    verbose = ctx.params["verbose"]
    if ctx.params["follow"]:
        record = runner.call(resolve_job(runner.service, ref))
        watch(runner, record.id, after=after, verbose=verbose, name=record.name)
        return
    record, events = runner.call(commands.logs(runner.service, ref, after=after))
    if ctx.params["as_json"]:
        LogPrinter(record.id, as_json=True, streams=Streams.std(), after=after).handle_all(events)
        return
    view = CellView(record.id, record.name, verbose=verbose)  # as a followed job shows
    for event in events:
        view.handle(event)
    view.update(force=True)


def _cancel(args: list[str]) -> None:
    ctx = parse(cli_jobs.cancel, "%j2c cancel", args)
    if ctx is not None:
        runner = _service_for(ctx)
        # A job still stopping stays this kernel's to record: handed off at exit if need be.
        cancelled = runner.call(
            commands.cancel(runner.service, ctx.params["job"], hand_off=runner.jobs.add)
        )
        commands.render_cancelled(cancelled, as_json=ctx.params["as_json"], streams=Streams.std())


def _list(args: list[str]) -> None:
    ctx = parse(cli_jobs.list_jobs, "%j2c list", args)
    if ctx is not None:
        runner = _service_for(ctx)
        records = runner.call(commands.list_jobs(runner.service))
        commands.render_list(records, as_json=ctx.params["as_json"], streams=Streams.std())


def _results(args: list[str]) -> None:
    from j2c_server.cli import results_cmd

    ctx = parse(results_cmd.results, "%j2c results", args)
    if ctx is not None:
        runner = _service_for(ctx)
        params = ctx.params
        runner.call(
            results_cmd.show_or_copy(
                runner.service,
                params["job"],
                params["copy_to"],
                as_json=params["as_json"],
                streams=Streams.std(),
            )
        )


def _sweep(args: list[str]) -> Any:
    """``%j2c sweep status SWEEP``: the variants' rows (a list for ``pandas.DataFrame``), shown
    as ``j2c sweep status`` prints them."""
    from j2c_server.cli import sweep_cmd

    if args[:1] != ["status"]:
        raise _usage_error(
            f"j2c: usage: %j2c sweep status SWEEP [--json] [--metric NAME]\n{_USAGE}"
        )
    ctx = parse(sweep_cmd.status, "%j2c sweep status", args[1:])
    if ctx is None:
        return None
    runner, params = _service_for(ctx), ctx.params
    view = runner.call(sweep_cmd.sweep_status(runner.service, params["job"]))
    return sweep_cmd.sweep_rows(view, params["metrics"], as_json=params["as_json"])


def register(ipython: Any) -> None:
    """Register ``%j2c`` and ``%%j2c`` (called by ``%load_ext j2c_server``)."""

    def j2c(line: str, cell: str | None = None) -> Any:
        return run_line(line, ipython, cell)

    j2c.__doc__ = _USAGE
    ipython.register_magic_function(j2c, magic_kind="line_cell", magic_name="j2c")
