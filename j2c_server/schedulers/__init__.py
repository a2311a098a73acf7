"""Scheduler backends by name: the one table of them, open to other packages' entry points.

A backend is a module with a :class:`~.base.SchedulerBase` subclass (what differs per backend:
how its jobs start ``j2c-unpack``, its native document for ``--dry-run``, whether its jobs run
on other machines, what it supports) and a light settings model, validated as
``scheduler.<name>``. The built-in backends are listed in :data:`BACKENDS` (their settings
models load without the backend); an operator's package adds one through the
``j2c.schedulers`` entry-point group (value: ``"package.module:SchedulerClass"``, whose
``settings_model`` names its settings), without forking j2c.

Plug-ins are discovered once, on the first settings load (:func:`discover`), each in
isolation: one that fails to import, or is not a backend, is logged and skipped with the
reason (:func:`skipped_backends`, shown by ``j2c config`` and ``GET /config``); the others, the
built-ins and every front end work on. Nothing here runs at import, so a plug-in may import
:mod:`j2c_server.config` as the built-ins do.
"""

from __future__ import annotations

import importlib
import logging
import re
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any, cast

from j2c_server.core.errors import InvalidInput

if TYPE_CHECKING:
    from pydantic import BaseModel

    from j2c_server.config import J2CSettings
    from j2c_server.schedulers.base import Scheduler, SchedulerBase
    from j2c_server.wire.api import Capabilities, Resources

ENTRY_POINT_GROUP = "j2c.schedulers"
# Keys of ``scheduler.*`` that are not backends (settings.py's own; a test checks the list).
RESERVED_NAMES = frozenset({"default", "gpu_ledger", "pass_env", "placement", "section"})
# A backend's name is its settings key (``scheduler.<name>``, ``J2C_SCHEDULER__<NAME>__*``).
_NAME = re.compile(r"[a-z][a-z0-9_]*")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Backend:
    """Where a backend's scheduler class and settings model live ("module:attribute"); without
    ``settings``, the scheduler class's ``settings_model`` (imported to read it)."""

    scheduler: str
    settings: str | None = None


BACKENDS: dict[str, Backend] = {
    "local": Backend(".local.backend:LocalScheduler", ".local.settings:LocalSchedulerSettings"),
    "slurm": Backend(".slurm.backend:SlurmScheduler", ".slurm.settings:SlurmSettings"),
    "kubernetes": Backend(
        ".kubernetes.backend:KubernetesScheduler", ".kubernetes.settings:KubernetesSettings"
    ),
    "container": Backend(
        ".container.backend:ContainerScheduler", ".container.settings:ContainerSettings"
    ),
    "ray": Backend(".ray.backend:RayScheduler", ".ray.settings:RaySettings"),
}


@dataclass(frozen=True)
class Discovery:
    """The plug-ins found at start-up: the classes of those that loaded, and why each other
    one was skipped (name → "entry point: error")."""

    plugins: dict[str, type[SchedulerBase]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


def _load(target: str) -> Any:
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module, __name__), attribute)


class NotABackend(Exception):
    """What an entry point names cannot be a backend (the reason, without a traceback)."""


def _plugin_class(name: str, loaded: object) -> type[SchedulerBase]:
    """``loaded`` when it is a usable backend class; else :class:`NotABackend` saying why."""
    from pydantic import BaseModel

    from j2c_server.schedulers.base import SchedulerBase

    if not _NAME.fullmatch(name) or name in RESERVED_NAMES:
        raise NotABackend(
            f"{name!r} cannot be a scheduler's name: it must be lowercase letters, digits and _ "
            f"(its settings are scheduler.<name>), not one of {', '.join(sorted(RESERVED_NAMES))}"
        )
    if not (isinstance(loaded, type) and issubclass(loaded, SchedulerBase)):
        raise NotABackend("not a SchedulerBase subclass")
    model = getattr(loaded, "settings_model", None)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise NotABackend(f"{loaded.__name__}.settings_model is not a pydantic model")
    return loaded


@cache
def discover() -> Discovery:
    """The ``j2c.schedulers`` entry points, each loaded in isolation (once per process): a
    plug-in that fails is logged and skipped, never failing the settings or another backend."""
    from importlib.metadata import entry_points

    found = Discovery()
    try:
        points = list(entry_points(group=ENTRY_POINT_GROUP))
    except Exception:  # broken package metadata: no plug-ins, the built-ins still work
        log.warning("scheduler plug-ins not searched: %s entry points unreadable", exc_info=True)
        return found
    for point in points:
        if point.name in BACKENDS or point.name in found.plugins or point.name in found.skipped:
            log.warning(
                "scheduler plug-in %s = %s ignored: a backend named %r is already known",
                point.name,
                point.value,
                point.name,
            )
            continue
        try:
            found.plugins[point.name] = _plugin_class(point.name, point.load())
        except Exception as exc:  # whatever a plug-in's import raises: skip it, say why
            why = str(exc) if isinstance(exc, NotABackend) else f"{type(exc).__name__}: {exc}"
            found.skipped[point.name] = f"{point.value}: {why}"
            log.warning("scheduler plug-in %r skipped: %s", point.name, found.skipped[point.name])
    return found


def known_backends() -> dict[str, Backend]:
    """The backends jobs can use: the built-ins and the plug-ins that loaded."""
    plugins = discover().plugins
    return {**BACKENDS, **{name: Backend(_target(cls)) for name, cls in plugins.items()}}


def skipped_backends() -> dict[str, str]:
    """The plug-ins skipped at start-up and why (name → "entry point: error")."""
    return dict(discover().skipped)


def _target(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _plugin(name: str) -> type[SchedulerBase]:
    found = discover()
    if name in found.plugins:
        return found.plugins[name]
    if name in found.skipped:
        raise InvalidInput(
            f"scheduler {name!r} is not available: its plug-in was skipped at start-up "
            f"({found.skipped[name]})",
            field="scheduler",
            hint="fix or uninstall the plug-in's package; `j2c config` lists skipped plug-ins",
        )
    known = ", ".join(sorted(known_backends()))
    raise InvalidInput(f"unknown scheduler {name!r} (known: {known})", field="scheduler")


def settings_model(name: str) -> type[BaseModel]:
    """The model of ``scheduler.<name>`` (a plug-in's: its class's ``settings_model``)."""
    backend = BACKENDS.get(name)
    if backend is None or backend.settings is None:
        return scheduler_class(name).settings_model
    model: type[BaseModel] = _load(backend.settings)
    return model


def settings_models() -> dict[str, type[BaseModel]]:
    """Every usable backend's settings model by name (what ``scheduler.*`` is made of)."""
    return {name: settings_model(name) for name in known_backends()}


def scheduler_class(name: str) -> type[SchedulerBase]:
    backend = BACKENDS.get(name)
    if backend is None:
        return _plugin(name)
    cls: type[SchedulerBase] = _load(backend.scheduler)
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
    for asked, able, named, what in (
        (resources.cpus is not None, can.cpus, "resources.cpus", "CPU cores"),
        (resources.memory is not None, can.memory, "resources.memory", "memory"),
        (
            resources.time_limit_minutes is not None,
            can.time_limit,
            "resources.time_limit_minutes",
            "a time limit",
        ),
    ):
        if asked and not able:
            raise InvalidInput(
                f"the {name} scheduler cannot give a job {what}: it would run without",
                field=named,
                hint=f"leave {named} empty, or choose a scheduler that sets it",
            )
    if resources.nodes > 1 and not can.multi_node:
        raise InvalidInput(
            f"resources.nodes: the {name} scheduler runs a job on one node only "
            f"(asked for {resources.nodes})",
            field="resources.nodes",
            hint="ask for one node, or choose a scheduler that runs multi-node jobs",
        )
    scheduler_class(name).check_resources(resources)
