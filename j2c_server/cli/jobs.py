"""``j2c status | logs | cancel | remove | list``: the shared job registry, from the terminal.

A job is named by its id or by any prefix of it that only one job has. What each command does
and prints is ``commands.py``'s (shared with ``%j2c``); this module parses and runs it.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import click

from j2c_server.cli import commands
from j2c_server.cli.commands import LogPrinter, Streams, detached_message
from j2c_server.cli.options import config_option, json_option, load_cli_config, verbose_option
from j2c_server.cli.session import detach_signals, follow_until, open_service, resolve_job
from j2c_server.cli.submit import DETACHED_EXIT

if TYPE_CHECKING:
    from j2c_server.jobs.service import JobService

T = TypeVar("T")


def _run(config_file: Path | None, command: Callable[[JobService], Awaitable[T]]) -> T:
    """``command`` over a service opened for this one command."""

    async def run() -> T:
        async with open_service(load_cli_config(config_file).settings) as service:
            return await command(service)

    return asyncio.run(run())


@click.command()
@click.argument("job")
@json_option
@config_option
def status(job: str, as_json: bool, config_file: Path | None) -> None:
    """Show a job: status, stages (reused or why they ran), exit code, results."""
    record = _run(config_file, lambda service: commands.status(service, job))
    commands.render_status(record, as_json=as_json, streams=Streams.std())


@click.command()
@click.argument("job")
@click.option("-f", "--follow", is_flag=True, help="Keep following until the job ends.")
@click.option("--after", type=click.IntRange(0), default=0, help="Start after event number N.")
@verbose_option
@json_option
@config_option
def logs(
    job: str, follow: bool, after: int, verbose: bool, as_json: bool, config_file: Path | None
) -> None:
    """Print a job's output (all of it, or from --after N); -f follows it live; -v with j2c's
    whole diary."""
    streams = Streams.std()
    if not follow:
        record, events = _run(config_file, lambda service: commands.logs(service, job, after=after))
        printer = LogPrinter(
            record.id, as_json=as_json, streams=streams, after=after, verbose=verbose
        )
        printer.top(record)
        printer.handle_all(events)
        return

    async def run() -> int:
        with detach_signals() as detach:
            async with open_service(load_cli_config(config_file).settings) as service:
                record = await resolve_job(service, job)
                printer = LogPrinter(
                    record.id, as_json=as_json, streams=streams, after=after, verbose=verbose
                )
                if await follow_until(service, record.id, printer.handle, detach, after=after):
                    return 0
                streams.say(detached_message(record.id, printer.last_seq))
                return DETACHED_EXIT

    sys.exit(asyncio.run(run()))


@click.command()
@click.argument("job")
@json_option
@config_option
def cancel(job: str, as_json: bool, config_file: Path | None) -> None:
    """Ask a job to stop (SIGTERM, then a kill after the scheduler's grace period)."""
    # A job still stopping is handed to a detached watcher: this command exits now; a watcher
    # that finds another process driving the job waits for it or exits with it.
    record = _run(
        config_file,
        lambda service: commands.cancel(service, job, hand_off=service.run_detached_watcher),
    )
    commands.render_cancelled(record, as_json=as_json, streams=Streams.std())


@click.command()
@click.argument("job")
@config_option
def remove(job: str, config_file: Path | None) -> None:
    """Forget a finished job (record and log), as the Compute panel's Remove does."""
    removed = _run(config_file, lambda service: commands.remove(service, job))
    Streams.std().say(f"j2c: job {removed} removed")


@click.command("list")
@json_option
@config_option
def list_jobs(as_json: bool, config_file: Path | None) -> None:
    """List the jobs of the shared registry (CLI, magic and UI), newest first."""
    records = _run(config_file, commands.list_jobs)
    commands.render_list(records, as_json=as_json, streams=Streams.std())
