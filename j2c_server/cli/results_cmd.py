"""``j2c results JOB [--copy DIR]``: a finished job's outputs, listed or copied here.

The listing is the job's recorded results (names, sizes and sha256 from its verified outputs
index; what was left out and why). ``--copy DIR`` copies every output into ``DIR`` with its
relative path (``DIR/models/a.bin``), each one verified against the sha256 the index recorded
(``artifacts.py``: a file changed in the store is refused), and never over a file with other
content: such a file is named and kept, the others are copied, and the command exits 1.
``%j2c results`` is the same command in a notebook (``magic.py``).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from j2c_server.cli.commands import Streams
from j2c_server.cli.options import config_option, json_option, load_cli_config
from j2c_server.cli.output import json_text
from j2c_server.cli.session import open_service, resolve_job
from j2c_server.core.errors import J2CError
from j2c_server.core.units import byte_size
from j2c_server.jobs.artifacts import copy_into, open_artifact
from j2c_server.wire.api import JobRecord, JobResults

if TYPE_CHECKING:
    from j2c_server.jobs.service import JobService


def describe_outputs(record: JobRecord) -> list[str]:
    """The job's outputs, one line each: name, size, the start of its sha256."""
    results = record.results or JobResults()
    lines = [f"job        {record.id} ({record.status.value})"]
    if results.output_uri:
        lines.append(f"outputs    {results.output_uri}")
    for artifact in results.artifacts:
        size = byte_size(artifact.size) if artifact.size is not None else "?"
        digest = f"  sha256:{artifact.sha256[:12]}" if artifact.sha256 else ""
        lines.append(f"  {artifact.name}  {size}{digest}")
    if results.outputs_note:
        lines.append(f"note       {results.outputs_note}")
    return lines


async def copy_outputs(
    service: JobService, record: JobRecord, folder: Path, streams: Streams
) -> int:
    """Copy every output of ``record`` into ``folder``; how many could not be copied."""
    results = record.results or JobResults()
    refused = 0
    for artifact in results.artifacts:
        try:
            async with open_artifact(record, artifact.name, service.settings.storage) as opened:
                path, copied = await asyncio.to_thread(copy_into, opened, folder)
        except J2CError as exc:
            refused += 1
            streams.say(f"not copied: {artifact.name}: {exc}")
            continue
        streams.print(f"{'copied' if copied else 'already there'}  {path}")
    return refused


async def show_or_copy(
    service: JobService, ref: str, copy_to: Path | None, *, as_json: bool, streams: Streams
) -> int:
    """What ``j2c results`` and ``%j2c results`` do: the exit code (1: something not copied)."""
    record = await resolve_job(service, ref)
    if copy_to is None:
        text = json_text(record.results or JobResults())
        streams.print(text if as_json else "\n".join(describe_outputs(record)))
        return 0
    if not (record.results and record.results.artifacts):
        streams.say(f"job {record.id} has no outputs to copy")
        return 0
    refused = await copy_outputs(service, record, copy_to, streams)
    return 1 if refused else 0


@click.command()
@click.argument("job")
@click.option(
    "--copy",
    "copy_to",
    type=click.Path(file_okay=False, path_type=Path),
    help="Copy every output into this folder, keeping relative paths (verified, never "
    "overwriting another file).",
)
@json_option
@config_option
def results(job: str, copy_to: Path | None, as_json: bool, config_file: Path | None) -> None:
    """List a job's outputs (name, size, sha256, what was left out); --copy DIR copies them."""

    async def run() -> int:
        async with open_service(load_cli_config(config_file).settings) as service:
            return await show_or_copy(service, job, copy_to, as_json=as_json, streams=Streams.std())

    sys.exit(asyncio.run(run()))
