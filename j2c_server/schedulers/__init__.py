"""Scheduler backends, chosen by name in configuration (``scheduler.default`` or per request)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import InvalidInput

if TYPE_CHECKING:
    from ..config import J2CSettings
    from .base import Scheduler

# name -> "module:factory"; factories take (settings) and return a Scheduler. Imported lazily so a
# backend's dependencies load only when it is used.
BACKENDS: dict[str, str] = {
    "local": ".local:LocalScheduler",
    "kubernetes": ".kubernetes:KubernetesScheduler",
    "slurm": ".slurm:SlurmScheduler",
    "container": ".container:ContainerScheduler",
}


def make_scheduler(name: str, settings: J2CSettings) -> Scheduler:
    import importlib

    target = BACKENDS.get(name)
    if target is None:
        known = ", ".join(sorted(BACKENDS)) or "none"
        raise InvalidInput(f"unknown scheduler {name!r} (known: {known})", field="scheduler")
    module_name, _, factory = target.partition(":")
    module = importlib.import_module(module_name, __name__)
    scheduler: Scheduler = getattr(module, factory)(settings)
    return scheduler
