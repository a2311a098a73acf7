"""A request before it is a job: resolved (paths confined, env checked, backend and resources
settled) and drafted into a record without an id; what preflight, the image report and a dry
run show from that draft, writing nothing to the registry.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from j2c_server.config import J2CSettings
from j2c_server.core.job_env import check_request_env
from j2c_server.jobs.clients import Clients
from j2c_server.jobs.paths import resolve_request
from j2c_server.jobs.send.inputs import (
    job_image,
    job_spec,
    layer_cache_dir,
    pack_spec,
    record_image_report,
    runner_check,
    shown_spec,
)
from j2c_server.jobs.send.preflight import (
    warn_backend_at_preflight,
    warn_store_at_preflight,
    with_warning,
)
from j2c_server.jobs.send.rule import request_key
from j2c_server.pack import PackPlan, make_manifest
from j2c_server.schedulers import check_resources, scheduler_class
from j2c_server.storage.base import manifest_key
from j2c_server.wire.api import JobRecord, JobRequest, JobStatus
from j2c_server.wire.image import ImageReport


class Drafts:
    """Requests resolved and drafted; preflight, image report and dry run."""

    def __init__(self, settings: J2CSettings, clients: Clients, root_dir: str | None) -> None:
        self.settings = settings
        self.clients = clients
        self.root_dir = root_dir

    async def resolve(self, request: JobRequest) -> JobRequest:
        check_request_env(request.env, self.settings.scheduler.pass_env)
        resolved = await asyncio.to_thread(resolve_request, request, self.root_dir)
        scheduler = resolved.scheduler or self.settings.scheduler.default
        check_resources(scheduler, resolved.resources)
        return resolved.model_copy(update={"scheduler": scheduler})

    def draft(self, resolved: JobRequest) -> JobRecord:
        """The record of a request before it has an id (preflight and dry runs stop here)."""
        now = time.time()
        return JobRecord(
            id="dry-run",
            name=resolved.name or _default_name(resolved),
            key="",  # set by submit(), from the request and the content it ships
            request_key=request_key(resolved),
            status=JobStatus.pending,
            request=resolved,
            scheduler=resolved.scheduler or self.settings.scheduler.default,
            created_at=now,
            updated_at=now,
        )

    async def preflight(self, request: JobRequest) -> PackPlan:
        """What packing this request would ship, leave out and warn about; writes nothing."""
        record = self.draft(await self.resolve(request))
        # The image check (a thread) runs beside the scan (a worker process).
        plan, report = await asyncio.gather(
            self.clients.packers.preflight(pack_spec(self.settings, record)),
            record_image_report(self.settings, record),
        )
        plan = plan.model_copy(update={"image_report": report})
        plan = with_warning(plan, await runner_check(self.settings, record, report))
        image = job_image(self.settings, record)
        plan = await warn_backend_at_preflight(plan, self.settings, record.scheduler, image)
        return await warn_store_at_preflight(plan, self.settings, record.scheduler)

    async def image_report(self, request: JobRequest) -> ImageReport | None:
        """What the request's target image lacks or has otherwise (``--dry-run`` prints it)."""
        return await record_image_report(self.settings, self.draft(await self.resolve(request)))

    async def dry_run(self, request: JobRequest) -> dict[str, Any]:
        """The job spec the scheduler would get, from a real pack (layers land in the local
        cache); nothing is uploaded, submitted or recorded. A backend with a native job
        document (``native_spec``: a Kubernetes batch/v1 Job, a container create request)
        shows that instead."""
        record = self.draft(await self.resolve(request))
        async with self.clients.pack_slots:
            result, packed_at = await self.clients.packers.pack(
                pack_spec(self.settings, record), layer_cache_dir(self.settings)
            )
        image = job_image(self.settings, record)
        manifest = make_manifest(result, source_image=image, created_at=packed_at)
        store = self.clients.store()
        digest = manifest.digest()
        uri = store.uri(manifest_key(digest))
        spec = job_spec(self.settings, record, uri, store, manifest_digest=digest)
        native = scheduler_class(record.scheduler).native_spec(spec, self.settings)
        return native if native is not None else shown_spec(spec, self.settings)


def _default_name(request: JobRequest) -> str:
    entry = request.call_path
    return entry if entry.startswith("-m ") else Path(entry).name
