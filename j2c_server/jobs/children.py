"""The one hook the jobs layer has for jobs with children, and what it hands that hook.

A sweep (:mod:`j2c_server.sweeps`) is a parent job that packs and uploads once and N child
jobs that run from its manifest. The jobs layer knows nothing of grids, variant tables or
MLflow's parent runs: it asks a :class:`ChildJobs` (given to :class:`~.service.JobService` by
whoever builds it) at four moments, and gives it a :class:`Family`, the public calls a parent's
hook may make: read a job, create one, write a job's events, reach the store and the
schedulers, and have a job driven.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from j2c_server.jobs.journal import Journal
from j2c_server.jobs.send import rule as send_rule
from j2c_server.registry.job_registry import Registry
from j2c_server.wire.api import JobRecord, JobRequest

if TYPE_CHECKING:
    from j2c_server.config import J2CSettings
    from j2c_server.jobs.audit import Actor
    from j2c_server.jobs.clients import Clients
    from j2c_server.jobs.fanout import EventBus
    from j2c_server.jobs.service import JobService
    from j2c_server.schedulers.base import Scheduler
    from j2c_server.storage.base import ObjectStore
    from j2c_server.wire.manifest import Manifest


class Family:
    """A parent job's reach into the jobs layer (its hook calls nothing else)."""

    def __init__(
        self,
        settings: J2CSettings,
        registry: Registry,
        bus: EventBus,
        clients: Clients,
        drive: Callable[[str], None],
    ) -> None:
        self.settings = settings
        self._registry = registry
        self._bus = bus
        self._clients = clients
        self._drive = drive

    async def get(self, job_id: str) -> JobRecord:
        return await self._registry.jobs.get(job_id)

    async def create(self, record: JobRecord, first: dict[str, Any]) -> JobRecord:
        """A new job (a child), or the identical one already there; its followers are woken."""
        created, _ = await self._registry.jobs.create_or_attach(
            record, first, send_rule.attach_to(record.request)
        )
        self._bus.publish(created.id)
        return created

    def journal(self, job_id: str) -> Journal:
        """The writer of a job's events and record (persisted, then published)."""
        return Journal(self._registry, self._bus, job_id)

    def store(self) -> ObjectStore:
        return self._clients.store()

    def scheduler(self, name: str) -> Scheduler:
        return self._clients.scheduler(name)

    def drive(self, job_id: str) -> None:
        """Watch a submitted child to its end here (the lease decides between processes)."""
        self._drive(job_id)


class ChildJobs(Protocol):
    """What a kind of job with children does at the four moments the jobs layer asks."""

    async def send(
        self, service: JobService, request: JobRequest, actor: Actor | None
    ) -> JobRecord:
        """A request with children (``request.sweep``): the parent (sent back through
        ``service.submit`` with its keys) and its children's records; the parent's record."""
        ...

    async def prepare(self, family: Family, parent: JobRecord, manifest: Manifest) -> Manifest:
        """The parent's manifest before its one upload (the children's rows in it)."""
        ...

    async def run(
        self,
        family: Family,
        journal: Journal,
        parent: JobRecord,
        manifest: Manifest,
        manifest_uri: str,
    ) -> None:
        """After the upload: submit the children pinned to it and keep the parent's status
        until every child has ended, the parent's final status written through ``journal``
        (its writer under its lease)."""
        ...

    async def cancel(self, service: JobService, parent: JobRecord, actor: Actor | None) -> None:
        """A cancel of the parent: every child's."""
        ...


class NoChildren:
    """A service built without a hook: a request with children is refused before any scan."""

    async def send(
        self, service: JobService, request: JobRequest, actor: Actor | None
    ) -> JobRecord:
        from j2c_server.core.errors import InvalidInput

        raise InvalidInput(
            "this j2c was started without sweeps: send one variant at a time", field="sweep"
        )

    async def prepare(self, family: Family, parent: JobRecord, manifest: Manifest) -> Manifest:
        return manifest

    async def run(
        self,
        family: Family,
        journal: Journal,
        parent: JobRecord,
        manifest: Manifest,
        manifest_uri: str,
    ) -> None:
        from j2c_server.core.errors import InvalidInput

        raise InvalidInput("this j2c was started without sweeps", field="sweep")

    async def cancel(self, service: JobService, parent: JobRecord, actor: Actor | None) -> None:
        return None
