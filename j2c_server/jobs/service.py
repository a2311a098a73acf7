"""``JobService``: the one API every front end (REST handlers, CLI, magic) uses for jobs.

It resolves and confines request paths, creates jobs in the registry (an identical request
attaches to the job already running it), drives their pipelines as background tasks under a
lease, and serves their event streams: a replay from any ``seq``, then live events pushed to
every follower through one feed per job (:class:`~.fanout.Fanout`).

The service holds its parts and answers for them: the drivers of the jobs this process drives
(:class:`~.drive.drivers.Drivers`), requests drafted before they are jobs: preflight, image
report, dry run (:class:`~.send.drafts.Drafts`), following and watching
(:class:`~.follow.Following`), and the hook for jobs with children (:mod:`.children`: sweeps,
given by whoever builds the service). Here: the send itself, cancel, and what is read or copied
from a job.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from j2c_server.config import J2CSettings
from j2c_server.core.errors import Conflict
from j2c_server.jobs.artifacts import (
    ArtifactFile,
    copy_all_into_project,
    copy_into_project,
    open_artifact,
)
from j2c_server.jobs.audit import Actor, audit, local_actor
from j2c_server.jobs.children import ChildJobs, Family, NoChildren
from j2c_server.jobs.clients import Clients
from j2c_server.jobs.drive.drivers import Drivers
from j2c_server.jobs.drive.lease import LEASE_TTL_S, account_ended
from j2c_server.jobs.drive.watch import Log
from j2c_server.jobs.fanout import EventBus, Fanout
from j2c_server.jobs.follow import Following
from j2c_server.jobs.journal import Journal
from j2c_server.jobs.send import rule as send_rule
from j2c_server.jobs.send.drafts import Drafts
from j2c_server.jobs.send.inputs import (
    job_image,
    layer_cache_dir,
    pack_spec,
    refuse_if_over_limit,
)
from j2c_server.jobs.send.preflight import check_before_scan
from j2c_server.jobs.send.rule import job_key
from j2c_server.pack import PackPlan
from j2c_server.registry.job_registry import open_registry
from j2c_server.registry.paging import Cursor, Page
from j2c_server.usage import metrics
from j2c_server.wire.api import (
    ArtifactsCopy,
    Event,
    EventKind,
    JobRecord,
    JobRequest,
    JobStatus,
)
from j2c_server.wire.event_frames import WireEvent
from j2c_server.wire.image import ImageReport
from j2c_server.wire.sweep import SweepInfo


def new_job_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


class JobService:
    def __init__(
        self,
        settings: J2CSettings,
        root_dir: str | None = None,
        log: Log | None = None,
        *,
        frontend: str = "python",
        children: ChildJobs | None = None,
    ) -> None:
        self.settings = settings
        # Who acts when a call names nobody: this process's user (the CLI, %j2c).
        self.actor = local_actor(frontend)
        self.root_dir = root_dir
        self.log: Log = log or logging.getLogger("j2c")
        self.registry = open_registry(settings.data_path())
        self.bus = EventBus()
        # A CLI command is one send its user waits for, with no event loop to keep responsive:
        # it packs in its own process (jobs/pack_worker.py says why).
        self.clients = Clients(settings, in_process=frontend == "cli")
        self.children: ChildJobs = children or NoChildren()
        self.drivers = Drivers(
            settings, self.registry, self.bus, self.clients, self.log, self.children
        )
        self.fanout = Fanout(
            self.registry,
            self.bus,
            spawn=self.drivers.spawn,
            on_idle=self.drivers.take_over_if_unwatched,
            idle_s=LEASE_TTL_S,
        )
        self.drafts = Drafts(settings, self.clients, root_dir)
        self.following = Following(settings, self.registry, self.fanout, self.drivers)
        self._started = False

    # ------------------------------------------------------------------ life

    def start(self) -> None:
        """Re-attach to jobs nobody drives (now, and whenever a lease expires later).
        Call with the event loop running; ``stop()`` ends it."""
        if self._started:
            return
        self._started = True
        self.clients.packers.warm()
        self.drivers.start()

    async def stop(self) -> None:
        """Stop driving jobs without cancelling them: their leases are released, so another
        process (a restarted server, a detached watcher) takes over at once."""
        if self.following.stopping:
            return
        self.following.stopping = True
        self.fanout.close()
        await self.drivers.stop()
        await self.clients.close()
        await asyncio.to_thread(self.registry.close)  # waits for calls in flight

    def family(self) -> Family:
        """What a parent job's hook may call (:mod:`.children`)."""
        return self.drivers.family

    # ------------------------------------------------------------------ send

    async def submit(
        self,
        request: JobRequest,
        actor: Actor | None = None,
        *,
        sweep_keys: list[str] | None = None,
        sweep_size: int = 0,
    ) -> JobRecord:
        """Scan what the request would ship, then attach to the job with the same request and
        content (see :mod:`.sending`) or create a new one and start its pipeline in the
        background; returns at once with the record, whose ``decision`` says which and why.
        A request with children goes to the children's hook, which comes back here for its
        parent (with ``sweep_keys``)."""
        if request.sweep is not None and sweep_keys is None:
            return await self.children.send(self, request, actor)
        actor = actor or self.actor
        draft = self.drafts.draft(await self.drafts.resolve(request))
        await check_before_scan(self.settings, draft.scheduler, job_image(self.settings, draft))
        earlier = await self.registry.jobs.latest_like(draft)
        scan = await self.clients.packers.scan(
            pack_spec(self.settings, draft),
            layer_cache_dir(self.settings),
            compare=earlier.content or None if earlier is not None else None,
        )
        refuse_if_over_limit(scan.report.plan)
        content = scan.report.content
        job_id = new_job_id()
        sweep = draft.request.sweep
        record = draft.model_copy(
            update={
                "id": job_id,
                "sweep": None
                if sweep is None
                else SweepInfo(
                    sweep_id=job_id,
                    keys=sweep_keys or [],
                    size=sweep_size,
                    max_parallel=sweep.max_parallel,
                ),
                "message": "waiting to be packed",
                "key": job_key(draft.request_key or "", content),
                "content": content,
                "decision": send_rule.new_job(draft.request, scan.report, earlier),
                "user": actor.user,
                "frontend": actor.frontend,
            }
        )
        first = {"kind": EventKind.status, "status": JobStatus.pending, "text": record.message}
        record, created = await self.registry.jobs.create_or_attach(
            record, first, send_rule.attach_to(record.request)
        )
        if created:
            self.clients.scans[record.id] = scan  # the pipeline packs from this walk
            self.bus.publish(record.id)
            metrics.job_submitted(record, user_labels=self.settings.metrics.user_labels)
        else:
            record = record.model_copy(update={"decision": send_rule.attached(record)})
        audit(
            self.log,
            "submit",
            actor,
            record.id,
            attached=not created,
            project=Path(record.request.code_path).name,
            scheduler=record.scheduler,
        )
        if not record.status.terminal and (
            created or await self.registry.leases.owner(record.id) is None
        ):
            self.drivers.drive(record.id)
        return record

    async def get(self, job_id: str) -> JobRecord:
        return await self.registry.jobs.get(job_id)

    async def cancel(self, job_id: str, actor: Actor | None = None) -> JobRecord:
        """Ask the job to stop. Before submission the pipeline stops; after it, the scheduler
        is asked to cancel and the watcher records the end. A finished job is returned as is."""
        record = await self.registry.jobs.get(job_id)
        if record.is_parent():
            await self.children.cancel(self, record, actor)  # every child
        if record.status.terminal or record.status == JobStatus.cancelling:
            return record
        audit(self.log, "cancel", actor or self.actor, job_id, status=record.status.value)
        journal = Journal(self.registry, self.bus, job_id)
        try:
            record = await journal.status(JobStatus.cancelling, "cancel requested")
        except Conflict:  # it finished meanwhile
            return await self.registry.jobs.get(job_id)
        driver = self.drivers.get(job_id)
        if record.handle is None:
            if driver is not None and driver.interrupt_for_cancel():
                return record
            if await self.registry.leases.owner(job_id) is None:
                # Nobody drives it: no pipeline to stop, so it is cancelled here and now.
                with contextlib.suppress(Conflict):
                    record = await journal.status(JobStatus.cancelled, "cancelled")
                    await account_ended(
                        job_id, self.registry, self.settings, self.clients, self.log
                    )
            return record
        await self.clients.scheduler(record.handle.scheduler).cancel(record.handle)
        if await self.registry.leases.owner(job_id) is None:
            self.drivers.drive(job_id)  # someone must record how it ended
        return record

    async def remove(self, job_id: str, actor: Actor | None = None) -> None:
        """Forget a finished job (record and events); a job still going is a Conflict."""
        await self.registry.jobs.remove(job_id)
        audit(self.log, "remove", actor or self.actor, job_id)

    @contextlib.asynccontextmanager
    async def open_artifact(self, job_id: str, name: str) -> AsyncIterator[ArtifactFile]:
        """One of the finished job's recorded artifacts, readable in chunks while the context
        lasts; a name the job's results do not list is refused."""
        record = await self.registry.jobs.get(job_id)
        async with open_artifact(record, name, self.settings.storage) as artifact:
            yield artifact

    async def copy_artifact(self, job_id: str, name: str, actor: Actor | None = None) -> str:
        """Copy an artifact (e.g. the executed notebook) into the job's project folder, at
        ``j2c-outputs/<job id>/<name>``; returns its path relative to the root folder."""
        record = await self.registry.jobs.get(job_id)
        async with open_artifact(record, name, self.settings.storage) as artifact:
            path = await asyncio.to_thread(copy_into_project, record, artifact, self.root_dir)
        audit(self.log, "copy_artifact", actor or self.actor, job_id, artifact=name)
        return path

    async def copy_all_artifacts(self, job_id: str, actor: Actor | None = None) -> ArtifactsCopy:
        """Every artifact of the finished job copied into its project folder ("Copy all");
        each file not copied is named with why (:func:`copy_all_into_project`)."""
        record = await self.registry.jobs.get(job_id)
        done = await copy_all_into_project(record, self.settings.storage, self.root_dir)
        audit(
            self.log,
            "copy_artifact",
            actor or self.actor,
            job_id,
            artifact="*",
            copied=len(done.copied),
        )
        return done

    async def events(self, job_id: str, after: int = 0, limit: int | None = None) -> list[Event]:
        events, _ = await self.registry.events.read(job_id, after, limit)
        return events

    async def list_jobs(self) -> list[JobRecord]:
        """Every job, newest first."""
        return await self.registry.jobs.all()

    async def jobs_page(self, limit: int, before: Cursor | None = None) -> Page:
        """One page of the job list, newest first, as JSON (``registry_paging``)."""
        return await self.registry.jobs.page(limit, before)

    # ------------------------------------------------------------------ its parts' calls

    async def preflight(self, request: JobRequest) -> PackPlan:
        """What packing this request would ship, leave out and warn about; writes nothing."""
        return await self.drafts.preflight(request)

    async def image_report(self, request: JobRequest) -> ImageReport | None:
        """What the request's target image lacks or has otherwise (``--dry-run`` prints it)."""
        return await self.drafts.image_report(request)

    async def dry_run(self, request: JobRequest) -> dict[str, Any]:
        """The job spec the scheduler would get (:meth:`.send.drafts.Drafts.dry_run`)."""
        return await self.drafts.dry_run(request)

    def stream(self, job_id: str, after: int = 0) -> AsyncIterator[Event]:
        """The job's events after ``after``, then live ones, to its terminal status."""
        return self.following.stream(job_id, after)

    def stream_wire(self, job_id: str, after: int = 0) -> AsyncIterator[list[WireEvent]]:
        """:meth:`stream` in batches, each event with its JSON bytes (the websocket's)."""
        return self.following.stream_wire(job_id, after)

    async def wait(self, job_id: str) -> JobRecord:
        """Wait for the job to end; returns its final record."""
        return await self.following.wait(job_id)

    async def watch(self, job_id: str) -> JobRecord:
        """Drive the job here whenever no other process does, until it ends."""
        return await self.following.watch(job_id)

    def run_detached_watcher(self, job_id: str, *, notify_fd: int | None = None) -> int:
        """A watcher process that outlives this one (:class:`.follow.Following`)."""
        return self.following.run_detached_watcher(job_id, notify_fd=notify_fd)
