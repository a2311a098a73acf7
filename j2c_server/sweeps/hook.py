"""Sweeps as the jobs layer's hook for jobs with children (:mod:`j2c_server.jobs.children`),
and the service every front end builds: a :class:`~j2c_server.jobs.service.JobService` with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from j2c_server.jobs.service import JobService
from j2c_server.sweeps.send import cancel_children, run_children, submit_sweep, with_variants
from j2c_server.sweeps.tracking import track_variants

if TYPE_CHECKING:
    from j2c_server.config import J2CSettings
    from j2c_server.jobs.audit import Actor
    from j2c_server.jobs.children import Family
    from j2c_server.jobs.drive.watch import Log
    from j2c_server.jobs.journal import Journal
    from j2c_server.wire.api import JobRecord, JobRequest
    from j2c_server.wire.manifest import Manifest


class Sweeps:
    """A sweep's parent packs and uploads once; its children run the variants."""

    async def send(
        self, service: JobService, request: JobRequest, actor: Actor | None
    ) -> JobRecord:
        return await submit_sweep(service, request, actor)

    async def prepare(self, family: Family, parent: JobRecord, manifest: Manifest) -> Manifest:
        manifest = with_variants(manifest, parent, family.settings.sweep.max_variants)
        # Every variant's MLflow run exists before any variant is submitted.
        rows = await track_variants(family, parent, manifest.variants or [], manifest)
        return manifest.model_copy(update={"variants": rows})

    async def run(
        self,
        family: Family,
        journal: Journal,
        parent: JobRecord,
        manifest: Manifest,
        manifest_uri: str,
    ) -> None:
        await run_children(family, journal, parent, manifest, manifest_uri)

    async def cancel(self, service: JobService, parent: JobRecord, actor: Actor | None) -> None:
        await cancel_children(service, parent, actor)


def job_service(
    settings: J2CSettings,
    root_dir: str | None = None,
    log: Log | None = None,
    *,
    frontend: str = "python",
) -> JobService:
    """The service of a front end: every job kind j2c has, sweeps included."""
    return JobService(settings, root_dir, log, frontend=frontend, children=Sweeps())
