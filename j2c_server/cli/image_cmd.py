"""``j2c image inventory IMAGE [--from-file F]``: an image's inventory, kept ahead of time.

With ``--from-file``, the JSON that ``python3 -I j2c_server/unpack/inventory.py`` printed in the
image (e.g. in the CI that builds it) is validated and kept for IMAGE's target. Without it, a
``scheduler: container`` target is probed through the engine now. The key is the one a preflight
of a job sent there looks for (the backend's ``inventory_key``); it is printed.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import click
from pydantic import ValidationError

from j2c_server.cli.options import config_option, json_option, load_cli_config
from j2c_server.cli.output import print_json, say
from j2c_server.core.errors import InvalidInput
from j2c_server.image.check import target_for
from j2c_server.image.store import InventoryStore, Stored
from j2c_server.schedulers import scheduler_class
from j2c_server.wire.image import ImageInventory


@click.group()
def image() -> None:
    """What the job images hold: their inventories, known before any upload."""


def _read(path: Path) -> ImageInventory:
    try:
        return ImageInventory.model_validate(json.loads(path.read_text()))
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror}", field="from_file") from None
    except ValueError as exc:  # JSON, or the model's (ValidationError is a ValueError)
        first = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
        raise InvalidInput(f"{path} is not an inventory: {first}", field="from_file") from None


@image.command()
@click.argument("image_ref", metavar="IMAGE")
@click.option(
    "--from-file",
    "from_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="The inventory JSON printed in the image (default: probe it; container backend only).",
)
@click.option("--scheduler", help="The backend jobs go to (default: scheduler.default).")
@json_option
@config_option
def inventory(
    image_ref: str,
    from_file: Path | None,
    scheduler: str | None,
    as_json: bool,
    config_file: Path | None,
) -> None:
    """Keep IMAGE's inventory for the preflights of jobs sent to it."""
    settings = load_cli_config(config_file).settings
    backend = scheduler or settings.scheduler.default
    target = target_for(settings, backend, image_ref)
    if target is None:
        raise InvalidInput(
            f"jobs of the {backend} backend run on the lab's own Python: nothing to keep",
            field="scheduler",
        )
    store = InventoryStore(settings.data_path())

    async def keep() -> Stored:
        key = await scheduler_class(backend).inventory_key(settings, target)
        if from_file is None:
            if key is None:
                raise InvalidInput(f"the {backend} backend has no image {image_ref}", field="image")
            probed = await scheduler_class(backend).probe_inventory(settings, target)
            if probed is None:
                raise InvalidInput(
                    f"only the container backend can probe an image from here; for {backend}, "
                    "run the inventory script in the image and give its output with --from-file",
                    field="from_file",
                )
            return await asyncio.to_thread(store.put, key, probed, "probe")
        given = _read(from_file)
        return await asyncio.to_thread(store.put, key or target.key, given, "operator")

    kept = asyncio.run(keep())
    summary = {
        "key": kept.key,
        "source": kept.source,
        "python": kept.inventory.python.version,
        "distributions": len(kept.inventory.distributions),
    }
    if as_json:
        print_json(summary)
        return
    say(
        f"j2c: kept the inventory of {target.label} (Python {summary['python']}, "
        f"{summary['distributions']} distributions) as {kept.key}"
    )
