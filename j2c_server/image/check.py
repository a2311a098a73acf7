"""The image check as the service runs it: at preflight, before upload, and while following a job.

:func:`image_report` finds the target's inventory (the image store, under the key its backend
resolves: for ``scheduler: container`` the engine's image ID; probed once where the backend
can run the image, ``SchedulerBase.probe_inventory``) and compares the job's needs with it, in
a worker thread (it reads metadata and parses the project's sources). It never fails a send: a
check that cannot be made says why in the report. :class:`InventoryLearner` takes the
``inventory`` line a job's ``j2c-unpack`` prints and keeps it for the job's target, so
the next preflight knows it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from j2c_server.config import J2CSettings
from j2c_server.core.errors import J2CError
from j2c_server.core.units import count
from j2c_server.image.base_layer import ShipChoice, select
from j2c_server.image.diff import compare, lab_glibc, unprovided_imports
from j2c_server.image.job_needs import lab_side
from j2c_server.image.store import InventoryStore, Stored
from j2c_server.schedulers import scheduler_class
from j2c_server.schedulers.base import InventoryTarget as Target
from j2c_server.wire.api import JobHandle
from j2c_server.wire.image import ImageInventory, ImageReport

MAX_LINE = 4 * 1024 * 1024
_log = logging.getLogger("j2c")
_locks: dict[str, asyncio.Lock] = {}
# Keys whose probe failed in this process, and why: not probed again until a restart (a job's
# own inventory line, or `j2c image inventory`, still teaches them).
_failed: dict[str, J2CError] = {}


def target_for(settings: J2CSettings, scheduler: str, image: str | None) -> Target | None:
    """The target of a job sent to ``scheduler`` with ``image`` (its backend says); None when
    the job runs on the lab's own Python."""
    return scheduler_class(scheduler).inventory_target(settings, image)


async def find_inventory(
    settings: J2CSettings, target: Target, store: InventoryStore
) -> tuple[str | None, Stored | None]:
    """(key, stored inventory) of ``target``: the kept one, else a new probe where its backend
    can make one (then kept). The key is None when the target does not exist where the job
    runs (an engine without that image); the inventory None when it is not known yet."""
    backend = scheduler_class(target.scheduler)
    key = await backend.inventory_key(settings, target)
    if key is None:
        return None, None
    async with _locks.setdefault(key, asyncio.Lock()):  # one probe per key at a time
        stored = await asyncio.to_thread(store.get, key)
        if stored is not None:
            return key, stored
        if key in _failed:  # said once; not a container per preflight
            raise _failed[key]
        try:
            data = await backend.probe_inventory(settings, target)
        except J2CError as exc:
            _failed[key] = exc
            raise
        if data is None:
            return key, None
        return key, await asyncio.to_thread(store.put, key, data, "probe")


def _not_known(target: Target, key: str, why: str | None = None) -> ImageReport:
    detail = f" ({why})" if why else ""
    return ImageReport(
        target=target.label,
        key=key,
        known=False,
        message=f"{target.label} not known yet{detail}: checked when the job starts",
    )


def _python_line(lab: str | None, inventory: ImageInventory) -> str | None:
    if lab is None or lab == inventory.python.minor:
        return None
    return (
        f"the venv was made with Python {lab}, the image runs {inventory.python.version}: "
        "the venv's packages will not load"
    )


def compare_with(
    stored: Stored,
    target: Target,
    venv_path: Path | None,
    code_path: Path,
    skip: list[Path],
    choice: ShipChoice | None = None,
    entry: str | None = None,
    runner: Sequence[str] = (),
) -> ImageReport:
    """The report of one project against one stored inventory (synchronous: a worker thread);
    ``entry`` (the request's ``call_path``) says where the job imports from and what its code
    reaches, ``runner`` the modules the entry point's runner imports (image/runner.py)."""
    started = time.monotonic()
    inventory = stored.inventory
    side = lab_side(venv_path, code_path, skip, entry, runner)
    found = compare(side.venv, side.base, side.imports, inventory, lab_glibc())
    shipping = select(
        found.missing,
        found.versions,
        side.base,
        inventory,
        choice or ShipChoice(),
        side.has_venv,
        side.base_folders,
    )
    return ImageReport(
        target=target.label,
        key=stored.key,
        known=True,
        source=stored.source,
        learned_at=stored.stored_at,
        python=_python_line(side.python, inventory),
        missing=found.missing,
        versions=found.versions,
        wheels=found.wheels,
        shadows=found.shadows,
        unprovided=unprovided_imports(
            side.imports.reachable,
            side.venv,
            side.base,
            [*side.venv_folders, *side.base_folders],
            inventory,
        ),
        shipping=shipping,
        seconds=round(time.monotonic() - started, 3),
    )


async def image_report(
    settings: J2CSettings,
    scheduler: str,
    image: str | None,
    venv_path: Path | None,
    code_path: Path,
    choice: ShipChoice | None = None,
    entry: str | None = None,
    runner: Sequence[str] = (),
) -> ImageReport | None:
    """The job's differences with its target; None when it runs on the lab's own Python.
    ``choice``: what ships of the lab's base (image/base_layer.py); ``entry``: the request's
    entry point; ``runner``: the modules the entry point's runner imports (image/runner.py)."""
    target = target_for(settings, scheduler, image)
    if target is None:
        return None
    store = InventoryStore(settings.data_path())
    key: str | None = target.key
    try:
        key, stored = await find_inventory(settings, target, store)
        if key is None:
            return _not_known(target, target.key, f"the {scheduler} backend has no such image")
        if stored is None:
            return _not_known(target, key)
        skip = [settings.data_path()]
        return await asyncio.to_thread(
            compare_with, stored, target, venv_path, code_path, skip, choice, entry, runner
        )
    except (J2CError, OSError, ValueError) as exc:
        # The check informs a send; it never stops one.
        _log.warning("j2c: image check of %s failed: %s", target.label, exc)
        return _not_known(target, key or target.key, str(exc))


class InventoryLearner:
    """Keeps the first ``inventory`` line of j2c-unpack in one job for the job's target key.
    The line is j2c's (tagged: the watch stage classified it, a job's own print cannot pass
    for it) in a job this user's server follows (its own registry), so its word is trusted;
    it must still be a valid inventory."""

    def __init__(
        self, settings: J2CSettings, scheduler: str, image: str | None, handle: JobHandle
    ) -> None:
        self.settings = settings
        self.target = target_for(settings, scheduler, image)
        self.handle = handle
        self.learned = False

    async def __call__(self, text: str) -> str:
        """Keep the line's inventory (``text``: its JSON); returns the short message the job's
        log shows instead."""
        if self.learned or self.target is None or len(text) > MAX_LINE:
            return f"(not kept: {'one per job' if self.learned else 'no target'})"
        self.learned = True  # one per job: a job's later lines are its own output
        try:
            data = json.loads(text)
            inventory = ImageInventory.model_validate(data)
            backend = scheduler_class(self.target.scheduler)
            key = await backend.job_inventory_key(self.settings, self.target, self.handle)
            if key is None:
                return "(not kept: the job is gone)"
            store = InventoryStore(self.settings.data_path())
            await asyncio.to_thread(store.put, key, inventory, "job")
        except (ValueError, ValidationError, J2CError, OSError) as exc:
            _log.warning("j2c: a job's inventory line was not kept: %s", exc)
            return f"(not kept: {str(exc)[:200]})"
        python = inventory.python.version
        dists = count(len(inventory.distributions), "distribution")
        return f"Python {python}, {dists}: kept for {self.target.label}"
