"""``JobService``: the one API every front end (REST handlers, CLI, magic) uses for jobs.

It resolves and confines request paths, creates jobs in the registry (an identical request
attaches to the job already running it), drives their pipelines as background tasks under a
lease, and serves their event streams: a replay from any ``seq``, then live events pushed to
every follower through one feed per job (:class:`~.eventbus.Fanout`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from j2c_server.config import J2CSettings
from j2c_server.core.errors import Conflict, J2CError
from j2c_server.core.file_modes import private_dir, private_opener
from j2c_server.core.job_env import check_request_env, mask_env
from j2c_server.jobs import send_rule
from j2c_server.jobs.artifacts import (
    ArtifactFile,
    copy_all_into_project,
    copy_into_project,
    open_artifact,
)
from j2c_server.jobs.audit import Actor, audit, local_actor
from j2c_server.jobs.clients import Clients
from j2c_server.jobs.fanout import EventBus, Fanout, FanoutClosed
from j2c_server.jobs.job_inputs import (
    job_image,
    job_spec,
    layer_cache_dir,
    pack_spec,
    record_image_report,
    refuse_if_over_limit,
)
from j2c_server.jobs.journal import Journal
from j2c_server.jobs.lease import LEASE_TTL_S, JobDriver, account_ended, new_owner
from j2c_server.jobs.preflight_checks import (
    check_store_for_submit,
    warn_backend_at_preflight,
    warn_store_at_preflight,
)
from j2c_server.jobs.request_paths import resolve_request
from j2c_server.jobs.send_rule import job_key, request_key
from j2c_server.jobs.sweep import cancel_children, submit_sweep
from j2c_server.jobs.sweep_view import sweep_view
from j2c_server.jobs.watch_stage import Log
from j2c_server.pack import PackPlan, make_manifest
from j2c_server.registry.job_registry import open_registry
from j2c_server.registry.paging import Cursor, Page
from j2c_server.schedulers import check_resources, scheduler_class
from j2c_server.storage.base import manifest_key
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
from j2c_server.wire.sweep_view import SweepView

ADOPT_EVERY_S = LEASE_TTL_S / 2
WATCH_RETRY_S = 1.0
# A live driver writes an ended job's usage record within seconds (retries included); after
# this, any service writes it (the driver died first).
ACCOUNT_GRACE_S = 20.0
FINISH_WAIT_S = 15.0  # at most, for a driver that is writing an ended job's usage record


class ServiceStopping(J2CError):
    """The service stopped while a client followed a job (the job itself goes on)."""

    status_code = 503
    code = "stopping"


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
    ) -> None:
        self.settings = settings
        # Who acts when a call names nobody: this process's user (the CLI, %j2c).
        self.actor = local_actor(frontend)
        self.root_dir = root_dir
        self.log: Log = log or logging.getLogger("j2c")
        self.registry = open_registry(settings.data_path())
        self.bus = EventBus()
        self.fanout = Fanout(
            self.registry,
            self.bus,
            spawn=self._spawn,
            on_idle=self._take_over_if_unwatched,
            idle_s=LEASE_TTL_S,
        )
        self.owner = new_owner()
        self.clients = Clients(settings)
        self.clients.drive = self._drive  # a sweep's parent hands each submitted variant over
        self._drivers: dict[str, JobDriver] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self._started = False
        self._stopping = False

    # ------------------------------------------------------------------ life cycle

    def start(self) -> None:
        """Re-attach to jobs nobody drives (now, and whenever a lease expires later).
        Call with the event loop running; ``stop()`` ends it."""
        if self._started:
            return
        self._started = True
        self.clients.packers.warm()
        self._spawn(self._adopt_forever(), "j2c-adopt")

    async def stop(self) -> None:
        """Stop driving jobs without cancelling them: their leases are released, so another
        process (a restarted server, a detached watcher) takes over at once."""
        if self._stopping:
            return
        self._stopping = True
        self.fanout.close()
        await self._let_ended_jobs_finish()
        tasks = list(self._background)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.clients.close()
        await asyncio.to_thread(self.registry.close)  # waits for calls in flight

    async def _let_ended_jobs_finish(self) -> None:
        """A job that has just ended (a CLI exits on its last event) still has its driver
        writing the usage record: wait a little for those drivers, not for running jobs."""
        ending: list[asyncio.Task[None]] = []
        for job_id, driver in list(self._drivers.items()):
            if driver.task is None or driver.task.done():
                continue
            with contextlib.suppress(J2CError):
                if (await self.registry.get(job_id)).status.terminal:
                    ending.append(driver.task)
        if ending:
            await asyncio.wait(ending, timeout=FINISH_WAIT_S)

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def _adopt_forever(self) -> None:
        while True:
            for job_id in await self.registry.unowned_active_jobs():
                self._drive(job_id)
            # Ended jobs whose driver died before writing their usage record.
            ended_before = time.time() - ACCOUNT_GRACE_S
            for job_id in await self.registry.unaccounted_ended_jobs(ended_before):
                await account_ended(job_id, self.registry, self.settings, self.clients, self.log)
            await asyncio.sleep(ADOPT_EVERY_S)

    def _drive(self, job_id: str) -> None:
        """Drive ``job_id`` here unless this process already does (the lease decides between
        processes)."""
        driver = self._drivers.get(job_id)
        if driver is not None and driver.task is not None and not driver.task.done():
            return
        driver = JobDriver(
            job_id,
            owner=self.owner,
            registry=self.registry,
            bus=self.bus,
            settings=self.settings,
            clients=self.clients,
            log=self.log,
        )
        self._drivers[job_id] = driver
        driver.task = self._spawn(driver.run(), f"j2c-job-{job_id}")
        driver.task.add_done_callback(lambda _: self._forget(job_id, driver))

    def _forget(self, job_id: str, driver: JobDriver) -> None:
        if self._drivers.get(job_id) is driver:
            del self._drivers[job_id]

    # ------------------------------------------------------------------ jobs

    async def _resolve(self, request: JobRequest) -> JobRequest:
        check_request_env(request.env, self.settings.scheduler.pass_env)
        resolved = await asyncio.to_thread(resolve_request, request, self.root_dir)
        scheduler = resolved.scheduler or self.settings.scheduler.default
        check_resources(scheduler, resolved.resources)
        return resolved.model_copy(update={"scheduler": scheduler})

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
        A sweep goes through :func:`.sweep.submit_sweep`, which comes back here for its parent."""
        if request.sweep is not None and sweep_keys is None:
            return await submit_sweep(self, request, actor)
        actor = actor or self.actor
        draft = self._draft(await self._resolve(request))
        check_store_for_submit(self.settings, draft.scheduler)
        earlier = await self.registry.latest_like(draft)
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
        record, created = await self.registry.create_or_attach(record, first)
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
            created or await self.registry.lease_owner(record.id) is None
        ):
            self._drive(record.id)
        return record

    async def preflight(self, request: JobRequest) -> PackPlan:
        """What packing this request would ship, leave out and warn about; writes nothing."""
        record = self._draft(await self._resolve(request))
        # The image check (a thread) runs beside the scan (a worker process).
        plan, report = await asyncio.gather(
            self.clients.packers.preflight(pack_spec(self.settings, record)),
            record_image_report(self.settings, record),
        )
        plan = plan.model_copy(update={"image_report": report})
        plan = await warn_backend_at_preflight(plan, self.settings, record.scheduler)
        return warn_store_at_preflight(plan, self.settings, record.scheduler)

    async def image_report(self, request: JobRequest) -> ImageReport | None:
        """What the request's target image lacks or has otherwise (``--dry-run`` prints it)."""
        return await record_image_report(self.settings, self._draft(await self._resolve(request)))

    async def dry_run(self, request: JobRequest) -> dict[str, Any]:
        """The job spec the scheduler would get, from a real pack (layers land in the local
        cache); nothing is uploaded, submitted or recorded. A backend with a native job
        document (``native_spec``: a Kubernetes batch/v1 Job, a container create request)
        shows that instead."""
        record = self._draft(await self._resolve(request))
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
        spec = spec.model_copy(update={"env": mask_env(spec.env, self.settings.scheduler.pass_env)})
        native = scheduler_class(record.scheduler).native_spec(spec, self.settings)
        return native if native is not None else spec.model_dump(mode="json")

    def _draft(self, resolved: JobRequest) -> JobRecord:
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

    async def get(self, job_id: str) -> JobRecord:
        return await self.registry.get(job_id)

    async def cancel(self, job_id: str, actor: Actor | None = None) -> JobRecord:
        """Ask the job to stop. Before submission the pipeline stops; after it, the scheduler
        is asked to cancel and the watcher records the end. A finished job is returned as is."""
        record = await self.registry.get(job_id)
        await cancel_children(self, record, actor)  # a sweep's parent: every variant
        if record.status.terminal or record.status == JobStatus.cancelling:
            return record
        audit(self.log, "cancel", actor or self.actor, job_id, status=record.status.value)
        journal = Journal(self.registry, self.bus, job_id)
        try:
            record = await journal.status(JobStatus.cancelling, "cancel requested")
        except Conflict:  # it finished meanwhile
            return await self.registry.get(job_id)
        driver = self._drivers.get(job_id)
        if record.handle is None:
            if driver is not None and driver.interrupt_for_cancel():
                return record
            if await self.registry.lease_owner(job_id) is None:
                # Nobody drives it: no pipeline to stop, so it is cancelled here and now.
                with contextlib.suppress(Conflict):
                    record = await journal.status(JobStatus.cancelled, "cancelled")
                    await account_ended(
                        job_id, self.registry, self.settings, self.clients, self.log
                    )
            return record
        await self.clients.scheduler(record.handle.scheduler).cancel(record.handle)
        if await self.registry.lease_owner(job_id) is None:
            self._drive(job_id)  # someone must record how it ended
        return record

    async def remove(self, job_id: str, actor: Actor | None = None) -> None:
        """Forget a finished job (record and events); a job still going is a Conflict."""
        await self.registry.remove(job_id)
        audit(self.log, "remove", actor or self.actor, job_id)

    @contextlib.asynccontextmanager
    async def open_artifact(self, job_id: str, name: str) -> AsyncIterator[ArtifactFile]:
        """One of the finished job's recorded artifacts, readable in chunks while the context
        lasts; a name the job's results do not list is refused."""
        record = await self.registry.get(job_id)
        async with open_artifact(record, name, self.settings.storage) as artifact:
            yield artifact

    async def copy_artifact(self, job_id: str, name: str, actor: Actor | None = None) -> str:
        """Copy an artifact (e.g. the executed notebook) into the job's project folder, at
        ``j2c-outputs/<job id>/<name>``; returns its path relative to the root folder."""
        record = await self.registry.get(job_id)
        async with open_artifact(record, name, self.settings.storage) as artifact:
            path = await asyncio.to_thread(copy_into_project, record, artifact, self.root_dir)
        audit(self.log, "copy_artifact", actor or self.actor, job_id, artifact=name)
        return path

    async def copy_all_artifacts(self, job_id: str, actor: Actor | None = None) -> ArtifactsCopy:
        """Every artifact of the finished job copied into its project folder ("Copy all");
        each file not copied is named with why (:func:`copy_all_into_project`)."""
        record = await self.registry.get(job_id)
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
        events, _ = await self.registry.events(job_id, after, limit)
        return events

    async def sweep(self, job_id: str) -> SweepView:
        """The sweep view of the sweep whose parent job is ``job_id`` (:mod:`.sweep_view`)."""
        return await sweep_view(self.settings, self.registry, job_id)

    async def stream(self, job_id: str, after: int = 0) -> AsyncIterator[Event]:
        """The job's events after ``after``, then live ones as they are persisted; ends after
        the terminal status event. Pushed by this process's writes and by one shared poll for
        other processes' (:class:`~.eventbus.Fanout`); a follower of a job nobody drives
        takes it over."""
        async for batch in self.stream_wire(job_id, after):
            for wire in batch:
                yield wire.to_event()

    async def stream_wire(self, job_id: str, after: int = 0) -> AsyncIterator[list[WireEvent]]:
        """:meth:`stream` in batches (what arrived together), each event with its JSON bytes
        (made once for all followers): what the websocket sends."""
        if self._stopping:
            raise ServiceStopping("j2c is shutting down; reconnect with your last seq")
        metrics.follower_joined()
        try:
            async for batch in self.fanout.follow_batches(job_id, after):
                yield batch
        except FanoutClosed:
            raise ServiceStopping("j2c is shutting down; reconnect with your last seq") from None
        finally:
            metrics.follower_left()

    async def _take_over_if_unwatched(self, job_id: str) -> None:
        """A followed job quiet for a lease's time: drive it here if nobody does."""
        if await self.registry.lease_owner(job_id) is None:
            self._drive(job_id)

    async def wait(self, job_id: str) -> JobRecord:
        """Wait for the job to end; returns its final record."""
        record = await self.registry.get(job_id)
        if not record.status.terminal:
            async for _ in self.stream(job_id, after=record.last_seq):
                pass
        return await self.registry.get(job_id)

    # ------------------------------------------------------------------ detached watching

    async def watch(self, job_id: str) -> JobRecord:
        """Drive the job in this process whenever no other process does, until it ends (what
        a detached watcher runs)."""
        while True:
            record = await self.registry.get(job_id)
            if record.status.terminal:
                return record
            self._drive(job_id)
            driver = self._drivers.get(job_id)
            if driver is not None and driver.task is not None:
                await asyncio.wait({driver.task})
            if (await self.registry.lease_owner(job_id)) is not None:
                await asyncio.sleep(WATCH_RETRY_S)

    def run_detached_watcher(self, job_id: str) -> int:
        """Start ``python -m j2c_server.jobs.detached_watcher <job_id>`` in its own session, so
        the job keeps being watched after this process (a CLI, a kernel) exits; returns its PID. It
        takes the lease as soon as it is free, watches to the end and exits."""
        logs = self.settings.data_path() / "watchers"
        private_dir(logs)
        settings = self.settings.model_copy(update={"data_dir": str(self.settings.data_path())})
        with open(logs / f"{job_id}.log", "ab", opener=private_opener) as log_file:
            process = subprocess.Popen(
                [sys.executable, "-m", "j2c_server.jobs.detached_watcher", job_id],
                stdin=subprocess.PIPE,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=Path.home(),
                env=os.environ.copy(),
            )
        assert process.stdin is not None
        # Settings travel on stdin: never on a command line other users can read.
        process.stdin.write(settings.model_dump_json().encode())
        process.stdin.close()
        return process.pid

    async def list_jobs(self) -> list[JobRecord]:
        """Every job, newest first."""
        return await self.registry.all_jobs()

    async def jobs_page(self, limit: int, before: Cursor | None = None) -> Page:
        """One page of the job list, newest first, as JSON (``registry_paging``)."""
        return await self.registry.jobs_page(limit, before)


def _default_name(request: JobRequest) -> str:
    entry = request.call_path
    return entry if entry.startswith("-m ") else Path(entry).name
