"""``j2c wait JOB [--timeout S]``: follow a job quietly and exit with its exit code.

Scripts chain jobs with it (``j2c wait A && j2c submit b.py``). Nothing goes to stdout; one line
on stderr says how the job ended. Past ``--timeout`` the job goes on (handed to a detached
watcher, as on Ctrl-C) and the command exits with 124, as coreutils' ``timeout`` does.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import click

from j2c_server.cli.options import config_option, load_cli_config
from j2c_server.cli.output import say
from j2c_server.cli.render import exit_code_of
from j2c_server.cli.session import detach_signals, follow_until, open_service, resolve_job
from j2c_server.cli.submit import DETACHED_EXIT

TIMEOUT_EXIT = 124


@click.command()
@click.argument("job")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="S",
    help="Give up after S seconds (exit code 124); the job goes on.",
)
@config_option
def wait(job: str, timeout: float | None, config_file: Path | None) -> None:
    """Wait for a job to end and exit with its exit code (124 past --timeout)."""
    settings = load_cli_config(config_file).settings

    async def run() -> int:
        with detach_signals() as detach:
            async with open_service(settings) as service:
                record = await resolve_job(service, job)
                if not record.status.terminal:
                    timed_out = asyncio.Event()

                    def give_up() -> None:
                        # Past the timeout, let go of the job as Ctrl-C does.
                        timed_out.set()
                        detach.set()

                    loop = asyncio.get_running_loop()
                    timer = loop.call_later(timeout, give_up) if timeout is not None else None
                    try:
                        ended = await follow_until(service, record.id, lambda _: None, detach)
                    finally:
                        if timer is not None:
                            timer.cancel()
                    record = await service.get(record.id)
                    if not ended:
                        if timed_out.is_set():
                            say(
                                f"j2c: timed out: job {record.id} is still {record.status.value} "
                                f"after {timeout:g} s and keeps running; "
                                f"wait again with `j2c wait {record.id}`"
                            )
                            return TIMEOUT_EXIT
                        say(f"j2c: stopped waiting; job {record.id} keeps running")
                        return DETACHED_EXIT
                code = record.exit_code
                note = f" (exit code {code})" if code is not None else ""
                say(f"j2c: job {record.id} {record.status.value}{note}")
                return exit_code_of(record)

    sys.exit(asyncio.run(run()))
