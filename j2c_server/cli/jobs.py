"""``j2c status | logs | cancel | list``: the shared job registry, read from the terminal.

A job is named by its id or by any prefix of it that only one job has.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import click

from ..models import Event, EventKind, JobRecord
from ..results import describe_results
from .options import config_option, json_option, load_cli_config
from .output import print_json, print_json_line, say
from .render import TerminalRenderer, stage_line
from .session import detach_signals, follow_until, open_service, resolve_job
from .submit import DETACHED_EXIT, detached_message


def _settings(config_file: Path | None) -> Any:
    return load_cli_config(config_file).settings


@click.command()
@click.argument("job")
@json_option
@config_option
def status(job: str, as_json: bool, config_file: Path | None) -> None:
    """Show a job: status, stages (reused or why they ran), exit code, results."""

    async def run() -> JobRecord:
        async with open_service(_settings(config_file)) as service:
            return await resolve_job(service, job)

    record = asyncio.run(run())
    if as_json:
        print_json(record)
    else:
        click.echo(describe(record))


def describe(record: JobRecord) -> str:
    lines = [
        f"job        {record.id}",
        f"name       {record.name}",
        f"status     {record.status.value}" + (f" ({record.message})" if record.message else ""),
        f"scheduler  {record.scheduler}",
        f"created    {_clock(record.created_at)}",
    ]
    if record.exit_code is not None:
        lines.append(f"exit code  {record.exit_code}")
    for name, stage in record.stages.items():
        lines.append("  " + stage_line(name, stage.state, stage.seconds, stage.reason))
    lines.extend(describe_results(record.results))
    return "\n".join(lines)


@click.command()
@click.argument("job")
@click.option("-f", "--follow", is_flag=True, help="Keep following until the job ends.")
@click.option("--after", type=click.IntRange(0), default=0, help="Start after event number N.")
@json_option
@config_option
def logs(job: str, follow: bool, after: int, as_json: bool, config_file: Path | None) -> None:
    """Print a job's output (all of it, or from --after N); -f follows it live."""

    async def run() -> int:
        with detach_signals() as detach:
            async with open_service(_settings(config_file)) as service:
                record = await resolve_job(service, job)
                renderer = TerminalRenderer(record.id, tty=False, out=sys.stdout, err=sys.stderr)
                last = after

                def emit(event: Event) -> None:
                    nonlocal last
                    last = event.seq
                    if as_json:
                        print_json_line(event)
                    elif event.kind in (EventKind.log, EventKind.status, EventKind.error):
                        renderer.handle(event)

                if not follow:
                    for event in await service.events(record.id, after):
                        emit(event)
                    return 0
                if await follow_until(service, record.id, emit, detach, after=after):
                    return 0
                say(detached_message(record.id, last))
                return DETACHED_EXIT

    sys.exit(asyncio.run(run()))


@click.command()
@click.argument("job")
@json_option
@config_option
def cancel(job: str, as_json: bool, config_file: Path | None) -> None:
    """Ask a job to stop (SIGTERM, then a kill after the scheduler's grace period)."""

    async def run() -> JobRecord:
        async with open_service(_settings(config_file)) as service:
            record = await service.cancel((await resolve_job(service, job)).id)
            if not record.status.terminal:
                # Someone must record how it ends after this command exits; a watcher that
                # finds another process driving the job waits for it or exits with it.
                service.run_detached_watcher(record.id)
            return record

    record = asyncio.run(run())
    if as_json:
        print_json(record)
    else:
        click.echo(f"j2c: job {record.id} {record.status.value}", err=True)


@click.command("list")
@json_option
@config_option
def list_jobs(as_json: bool, config_file: Path | None) -> None:
    """List the jobs of the shared registry (CLI, magic and UI), newest first."""

    async def run() -> list[JobRecord]:
        async with open_service(_settings(config_file)) as service:
            return await service.list()

    records = asyncio.run(run())
    if as_json:
        print_json(newest_first(records))
    else:
        click.echo(table(records))


def newest_first(records: list[JobRecord]) -> list[JobRecord]:
    return sorted(records, key=lambda record: record.created_at, reverse=True)


def table(records: list[JobRecord]) -> str:
    width = max([len(record.id) for record in records] + [2]) + 2
    lines = [f"{'ID':<{width}}{'STATUS':<12}{'EXIT':<6}{'CREATED':<21}NAME"]
    for record in newest_first(records):
        exit_code = "" if record.exit_code is None else str(record.exit_code)
        lines.append(
            f"{record.id:<{width}}{record.status.value:<12}{exit_code:<6}"
            f"{_clock(record.created_at):<21}{record.name}"
        )
    return "\n".join(lines)


def _clock(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))
