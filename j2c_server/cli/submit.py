"""``j2c submit`` (alias ``j2c pack``): send the project to a scheduler and follow the job.

Waiting is the default: a few lines of j2c's (the job sent, its status, how it ended; a failed
job's reason and what to do) around the job's output, then the job's exit code as the
command's; ``-v`` shows j2c's whole diary. Ctrl-C (or SIGTERM/SIGHUP) detaches without
cancelling: a detached watcher keeps following the job. Submitting the same request again
attaches to the same job. ``--notify`` hands the watcher this terminal (``/dev/tty``, opened at
start): it prints one line there when the job ends, if the terminal is still open.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from j2c_server.cli.commands import detached_message
from j2c_server.cli.failures import exit_code_for_code
from j2c_server.cli.options import (
    SubmitCommand,
    build_request,
    cli_defaults,
    default_venv_note,
    flags_layer,
    load_cli_config,
    script_args,
    submit_options,
)
from j2c_server.cli.output import print_json, say
from j2c_server.cli.render import exit_code_of
from j2c_server.cli.session import detach_signals, follow_until, open_service
from j2c_server.cli.terminal import TerminalRenderer
from j2c_server.config import J2CSettings
from j2c_server.image.text import report_lines
from j2c_server.jobs.end_notice import open_terminal
from j2c_server.wire.api import JobRequest

if TYPE_CHECKING:
    from j2c_server.jobs.service import JobService

DETACHED_EXIT = 130

_HELP = """Pack the project and its venv, submit ENTRY (a .py script, a notebook or
'-m module') and follow the job. Arguments after `--` go to the entry point:

    j2c submit train.py --gpus 1 -- --epochs 3
"""


def _make_command(name: str, help_text: str) -> click.Command:
    @click.command(name, cls=SubmitCommand, help=help_text, options_metavar="[OPTIONS]")
    @submit_options
    @click.option(
        "--notify",
        is_flag=True,
        help="Once detached (--no-wait, Ctrl-C): print one line here when the job ends.",
    )
    @click.pass_context
    def command(ctx: click.Context, /, **params: Any) -> None:
        config = load_cli_config(params["config_file"])
        cwd = Path.cwd()
        defaults = cli_defaults(cwd, os.environ)
        flags = flags_layer(params, script_args(ctx), cwd)
        request = build_request(defaults, config.job, flags)
        note = default_venv_note(defaults, config.job, flags)
        if note and not params["as_json"]:
            say(f"j2c: {note}")
        if params["dry_run"]:
            print_json(asyncio.run(_dry_run(config.settings, request)))
            return
        notify_fd = _terminal_to_notify(params["as_json"]) if params["notify"] else None
        try:
            code = asyncio.run(
                _submit(
                    config.settings,
                    request,
                    wait=not params["no_wait"],
                    as_json=params["as_json"],
                    notify_fd=notify_fd,
                    verbose=params["verbose"],
                )
            )
        finally:
            if notify_fd is not None:
                os.close(notify_fd)  # the watcher holds its own copy
        ctx.exit(code)

    return command


submit = _make_command("submit", _HELP)
pack = _make_command("pack", "Alias of `j2c submit`.\n\n" + _HELP)


async def _dry_run(settings: J2CSettings, request: JobRequest) -> dict[str, Any]:
    async with open_service(settings) as service:
        for line in report_lines(await service.image_report(request)):
            say(f"j2c: {line}")
        return await service.dry_run(request)


def _terminal_to_notify(as_json: bool) -> int | None:
    """The controlling terminal for the watcher's end line; without one, say so and go on."""
    fd = open_terminal()
    if fd is None:
        say("j2c: --notify: no terminal to notify (this command has no controlling tty); "
            "`j2c wait JOB` follows a job from a script")  # fmt: skip
    return fd


async def _submit(
    settings: J2CSettings,
    request: JobRequest,
    *,
    wait: bool,
    as_json: bool,
    notify_fd: int | None = None,
    verbose: bool = False,
) -> int:
    with detach_signals() as detach:
        async with open_service(settings) as service:
            return await _submit_with(
                service,
                request,
                detach,
                wait=wait,
                as_json=as_json,
                notify_fd=notify_fd,
                verbose=verbose,
            )


async def _submit_with(
    service: JobService,
    request: JobRequest,
    detach: asyncio.Event,
    *,
    wait: bool,
    as_json: bool,
    notify_fd: int | None = None,
    verbose: bool = False,
) -> int:
    record = await service.submit(request)
    decision = f": {record.decision.message}" if record.decision is not None else ""
    if not wait or detach.is_set():
        if decision:
            say(f"j2c: job {record.id}{decision}")
        service.run_detached_watcher(record.id, notify_fd=notify_fd)
        if notify_fd is not None:
            say(f"j2c: this terminal gets a line when job {record.id} ends")
        if as_json:
            print_json(record)
        else:
            click.echo(record.id)
            say(f"j2c: follow it with `j2c logs -f {record.id}`")
        return 0 if not wait else DETACHED_EXIT
    say(f"j2c: job {record.id} ({record.name}){decision or ' ' + record.status.value}")
    renderer = TerminalRenderer(
        record.id,
        tty=sys.stderr.isatty(),
        out=sys.stdout,
        err=sys.stderr,
        logs_to_err=as_json,
        verbose=verbose,
    )
    finished = await follow_until(service, record.id, renderer.handle, detach, notify_fd=notify_fd)
    renderer.close()
    if not finished:
        say(detached_message(record.id, renderer.board.last_seq))
        return DETACHED_EXIT
    final = await service.get(record.id)
    if as_json:
        print_json(final)
    if final.exit_code is None and renderer.board.error_code is not None:
        return exit_code_for_code(renderer.board.error_code)
    return exit_code_of(final)
