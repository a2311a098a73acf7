"""``j2c sweep status SWEEP``: a sweep's variants as the Compute panel's sweep view shows them.

One row per variant: its index and job, each swept value, status, duration, exit code and its
metrics (from its MLflow run, else its ``metrics.json``: ``sweeps/view.py``, the same
``JobService.sweep`` that answers ``GET /jobs/{id}/sweep``). ``--json`` prints the rows as flat
dicts (one key per value and per metric), so ``pandas.DataFrame(rows)`` has one row per
variant; ``%j2c sweep status`` (``magic.py``) returns them as a :class:`SweepRows` list that
displays as what the command prints.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from j2c_server.cli.commands import Streams
from j2c_server.cli.options import config_option, json_option, load_cli_config
from j2c_server.cli.output import json_text
from j2c_server.cli.session import open_service, resolve_job
from j2c_server.core.errors import InvalidInput
from j2c_server.core.units import duration
from j2c_server.jobs.end_notice import job_seconds
from j2c_server.sweeps.view import sweep_children, sweep_view
from j2c_server.wire.api import JobRecord
from j2c_server.wire.sweep_view import SweepVariant, SweepView

if TYPE_CHECKING:
    from j2c_server.jobs.service import JobService

# Every row's own columns; a swept name or metric of the same name is prefixed to keep both.
FIXED = ("index", "job_id", "status", "duration_s", "exit_code")


class SweepRows(list[dict[str, Any]]):
    """The variants' flat rows; shown (in a notebook's output) as the command's text."""

    def __init__(self, rows: list[dict[str, Any]], text: str) -> None:
        super().__init__(rows)
        self.text = text

    def __repr__(self) -> str:
        return self.text

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.text)


async def sweep_status(service: JobService, ref: str) -> SweepView:
    """The sweep whose parent job ``ref`` names (an id or a prefix only one job has)."""
    record = await resolve_job(service, ref)
    if sweep_children(record) is None:
        raise not_a_sweep(record)
    return await sweep_view(service, record.id)


def not_a_sweep(record: JobRecord) -> InvalidInput:
    info = record.sweep
    if info is not None and info.parent is not None:
        return InvalidInput(
            f"job {record.id} is variant {info.index} of sweep {info.parent}, not a sweep",
            field="job",
            hint=f"`j2c sweep status {info.parent}` shows every variant",
        )
    return InvalidInput(
        f"job {record.id} is not a sweep (it was sent without --sweep)",
        field="job",
        hint="`j2c list` shows the jobs; a sweep's row reads like '3/6 succeeded'",
    )


def seconds_so_far(job: JobRecord) -> float | None:
    """How long the variant ran (so far, while it runs); None before it started."""
    if job.started_at is None:
        return None
    if job.status.terminal:
        return job_seconds(job)
    return max(0.0, time.time() - job.started_at)


def metric_names(view: SweepView, chosen: tuple[str, ...] = ()) -> list[str]:
    """The metrics to show: those ``chosen``, else every one some variant reports."""
    if chosen:
        return list(chosen)
    return sorted({name for variant in view.variants for name in variant.metrics})


def _key(name: str, taken: set[str], prefix: str) -> str:
    key = name if name not in taken else f"{prefix}{name}"
    taken.add(key)
    return key


def rows(view: SweepView, metrics: list[str]) -> list[dict[str, Any]]:
    """One flat dict per variant: index, job_id, each swept value, status, duration_s,
    exit_code and each metric (None where the variant has none)."""
    taken = set(FIXED)
    params = {name: _key(name, taken, "param_") for name in view.keys}
    columns = {name: _key(name, taken, "metric_") for name in metrics}
    found: list[dict[str, Any]] = []
    for variant in view.variants:
        job, seconds = variant.job, seconds_so_far(variant.job)
        row: dict[str, Any] = {"index": variant.index, "job_id": job.id}
        row.update({key: variant.params.get(name) for name, key in params.items()})
        row["status"] = job.status.value
        row["duration_s"] = None if seconds is None else round(seconds, 1)
        row["exit_code"] = job.exit_code
        row.update({key: variant.metrics.get(name) for name, key in columns.items()})
        found.append(row)
    return found


def _cells(variant: SweepVariant, keys: list[str], metrics: list[str]) -> list[str]:
    job, seconds = variant.job, seconds_so_far(variant.job)
    values = [variant.params.get(name, "") for name in keys]
    shown = [variant.metrics.get(name) for name in metrics]
    return [
        str(variant.index),
        job.id,
        *values,
        job.status.value,
        "" if seconds is None else duration(seconds),
        "" if job.exit_code is None else str(job.exit_code),
        *("" if value is None else f"{value:.4g}" for value in shown),
    ]


def table(view: SweepView, metrics: list[str]) -> str:
    """The aggregate, then one aligned line per variant (the sweep view's columns)."""
    header = ["#", "JOB", *view.keys, "STATUS", "DURATION", "EXIT", *metrics]
    lines = [header, *(_cells(variant, view.keys, metrics) for variant in view.variants)]
    widths = [max(len(line[column]) for line in lines) for column in range(len(header))]
    text = [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)) for line in lines
    ]
    return "\n".join([f"sweep {view.parent.id}: {view.summary}", *(t.rstrip() for t in text)])


def sweep_rows(view: SweepView, metrics: tuple[str, ...], *, as_json: bool) -> SweepRows:
    """The rows, shown as the table or as their JSON."""
    names = metric_names(view, metrics)
    found = rows(view, names)
    return SweepRows(found, json_text(found) if as_json else table(view, names))


@click.group()
def sweep() -> None:
    """Sweeps: one send, many variants (docs/sweeps.md)."""


metric_option = click.option(
    "--metric",
    "metrics",
    multiple=True,
    help="Show this metric (repeatable); default: every metric some variant reports.",
)


@sweep.command("status")
@click.argument("job")
@metric_option
@json_option
@config_option
def status(job: str, metrics: tuple[str, ...], as_json: bool, config_file: Path | None) -> None:
    """One row per variant: values, status, duration, exit code and metrics."""

    async def run() -> SweepView:
        async with open_service(load_cli_config(config_file).settings) as service:
            return await sweep_status(service, job)

    Streams.std().print(sweep_rows(asyncio.run(run()), metrics, as_json=as_json).text)
