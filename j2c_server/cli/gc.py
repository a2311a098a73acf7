"""``j2c gc [--dry-run] [--older-than 30d]``: remove the store's blobs and manifests that no job
record of this registry and no recent manifest references (the rules: ``storage/gc.py``).

It refuses to run while a job of the registry is still sending (packing or uploading, no manifest
yet): the blobs that send found already in the store are named by no manifest until it is done.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import click

from j2c_server.cli.options import config_option, json_option, load_cli_config
from j2c_server.cli.output import print_json, say
from j2c_server.config import J2CSettings
from j2c_server.core.errors import Conflict, InvalidInput
from j2c_server.core.units import byte_size, count
from j2c_server.registry.job_registry import open_registry
from j2c_server.storage import open_store
from j2c_server.storage.gc import GcReport, collect_garbage, parse_age
from j2c_server.wire.api import JobStatus

# A send that has not written its manifest after this long crashed: it no longer blocks gc.
SENDING_STALE_S = 24 * 3600
_SENDING = {JobStatus.pending, JobStatus.packing, JobStatus.uploading}


async def run_gc(
    settings: J2CSettings, store_url: str | None, older_than_s: float, dry_run: bool
) -> GcReport:
    registry = open_registry(settings.data_path())
    try:
        records = await registry.jobs.all()
    finally:
        registry.close()
    now = time.time()
    sending = [
        r.id
        for r in records
        if r.status in _SENDING and not r.manifest_uri and now - r.updated_at < SENDING_STALE_S
    ]
    if sending:
        raise Conflict(
            f"job {sending[0]} is still being sent (no manifest yet): gc would not know which "
            "blobs it uses",
            field="jobs",
            hint="run gc again once it is submitted",
        )
    url = store_url or settings.storage_url()
    store = open_store(url, settings.storage)
    try:
        return await collect_garbage(
            store,
            [(r.id, r.manifest_uri) for r in records],
            older_than_s=older_than_s,
            dry_run=dry_run,
            now=now,
            label=url,
        )
    finally:
        await store.close()


def render(report: GcReport) -> None:
    verb = "would remove" if report.dry_run else "removed"
    for item in report.removed:
        say(f"{verb} {item.key} ({item.kind}, {byte_size(item.bytes)}, {item.age_days:g} days old)")
    freed = "would free" if report.dry_run else "freed"
    click.echo(
        f"{freed} {byte_size(report.bytes_freed)} ({count(len(report.removed), 'object')}) in "
        f"{report.store}; kept {count(report.kept_manifests, 'manifest')} and "
        f"{count(report.kept_blobs, 'blob')} ({byte_size(report.kept_bytes)})"
    )


@click.command()
@click.option("--dry-run", is_flag=True, help="Print what would be removed; remove nothing.")
@click.option(
    "--older-than",
    default="30d",
    show_default=True,
    help="Only objects written longer ago than this (30d, 12h, 90m) may go.",
)
@click.option("--store", "store_url", help="The store (default: the configured storage.url).")
@json_option
@config_option
def gc(
    dry_run: bool, older_than: str, store_url: str | None, as_json: bool, config_file: Path | None
) -> None:
    """Remove blobs and manifests no job record or recent manifest references."""
    try:
        age = parse_age(older_than)
    except ValueError as exc:
        raise InvalidInput(f"--older-than: {exc}", field="older_than") from None
    settings = load_cli_config(config_file).settings
    report = asyncio.run(run_gc(settings, store_url, age, dry_run))
    if as_json:
        print_json(report)
    else:
        render(report)
