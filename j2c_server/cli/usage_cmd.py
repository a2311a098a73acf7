"""``j2c usage``: the usage records in the store, aggregated per user, image, scheduler or day.

It needs read access to the store and nothing else: no lab server, no registry. The store is
the configured one (``storage.url``) or ``--store URL``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import click

from j2c_server.cli.options import config_option, json_option, load_cli_config
from j2c_server.cli.output import say
from j2c_server.usage.report import GROUPS, GroupBy, aggregate, load_records, parse_since, table


@click.command()
@click.option("--since", default="7d", show_default=True, help="Window: 90s, 30m, 12h, 7d, 2w.")
@click.option(
    "--by",
    "by",
    type=click.Choice(GROUPS),
    default="user",
    show_default=True,
    help="Group the jobs by.",
)
@click.option("--store", "store_url", help="Store to read (default: storage.url).")
@json_option
@config_option
def usage(
    since: str, by: GroupBy, store_url: str | None, as_json: bool, config_file: Path | None
) -> None:
    """GPU-hours, jobs, failures and median queue wait, from the store's usage records."""
    window = parse_since(since)
    settings = load_cli_config(config_file).settings
    url = store_url or settings.storage_url()

    async def read() -> tuple[list[dict[str, object]], str, int]:
        from j2c_server.storage import open_store

        store = open_store(url, settings.storage)
        try:
            loaded = await load_records(store, window)
        finally:
            await store.close()
        rows = aggregate(loaded.records, by)
        return [row.model_dump(mode="json") for row in rows], table(rows, by), loaded.skipped

    rows, text, skipped = asyncio.run(read())
    if skipped:
        say(f"j2c: {skipped} usage records could not be read (another version?); left out")
    if as_json:
        click.echo(json.dumps({"since": since, "by": by, "groups": rows}, indent=2))
        return
    click.echo(text)
