"""Scheduler backends by name: the one table of them, open to other packages' entry points.

A backend is a module with a :class:`~.base.SchedulerBase` subclass (what differs per backend:
how its jobs start ``j2c-unpack``, its native document for ``--dry-run``, what it supports) and
a light settings model, validated as ``scheduler.<name>`` without importing the backend. The
built-in backends are listed in :data:`BACKENDS`; an operator's package adds one through the
``j2c.schedulers`` entry-point group (value: ``"package.module:SchedulerClass"``, whose
``settings_model`` names its settings), without forking j2c.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, cast

from ..errors import InvalidInput

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ..config import J2CSettings
    from ..models import Capabilities, Resources
    from .base import Scheduler, SchedulerBase

ENTRY_POINT_GROUP = "j2c.schedulers"


@dataclass(frozen=True)
class Backend:
    """Where a backend's scheduler class and settings model live ("module:attribute"); without
    ``settings``, the scheduler class's ``settings_model`` (imported to read it)."""

    scheduler: str
    settings: str | None = None


BACKENDS: dict[str, Backend] = {
    "local": Backend(".local:LocalScheduler", ".local_settings:LocalSchedulerSettings"),
    "slurm": Backend(".slurm:SlurmScheduler", ".slurm_settings:SlurmSettings"),
    "kubernetes": Backend(".kubernetes:KubernetesScheduler", ".kube_settings:KubernetesSettings"),
    "container": Backend(".container:ContainerScheduler", ".container_settings:ContainerSettings"),
}


def _load(target: str) -> Any:
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module, __name__), attribute)


@cache
def known_backends() -> dict[str, Backend]:
    """The built-in backends and those other installed packages register."""
    from importlib.metadata import entry_points

    found = dict(BACKENDS)
    for point in entry_points(group=ENTRY_POINT_GROUP):
        if point.name not in found:
            found[point.name] = Backend(point.value)
    return found


def _backend(name: str) -> Backend:
    backend = known_backends().get(name)
    if backend is None:
        known = ", ".join(sorted(known_backends())) or "none"
        raise InvalidInput(f"unknown scheduler {name!r} (known: {known})", field="scheduler")
    return backend


def settings_model(name: str) -> type[BaseModel]:
    """The model of ``scheduler.<name>`` (a plug-in's: its class's ``settings_model``)."""
    backend = _backend(name)
    if backend.settings is None:
        return scheduler_class(name).settings_model
    model: type[BaseModel] = _load(backend.settings)
    return model


def scheduler_class(name: str) -> type[SchedulerBase]:
    cls: type[SchedulerBase] = _load(_backend(name).scheduler)
    return cls


def make_scheduler(name: str, settings: J2CSettings) -> Scheduler:
    return cast("Scheduler", scheduler_class(name)(settings))


def capabilities(name: str) -> Capabilities:
    return scheduler_class(name).capabilities


def check_resources(name: str, resources: Resources) -> None:
    """Refuse, naming the field, what the backend cannot do with a request (before packing)."""
    can = capabilities(name)
    if resources.gpus and not can.gpus:
        raise InvalidInput(f"the {name} scheduler hands out no GPUs", field="resources.gpus")
    if resources.gpu_type and not can.gpu_types:
        raise InvalidInput(
            f"the {name} scheduler cannot choose a GPU type", field="resources.gpu_type"
        )
    if resources.nodes > 1 and not can.multi_node:
        raise InvalidInput(
            f"resources.nodes: the {name} scheduler runs a job on one node only "
            f"(asked for {resources.nodes})",
            field="resources.nodes",
            hint="ask for one node, or choose a scheduler that runs multi-node jobs",
        )
