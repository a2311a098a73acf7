"""Who drives a job: one process at a time, by a lease row in the registry.

A driver takes the job's lease (owner ``host:pid:uuid``, expiring ~10 s ahead), renews it every
few seconds while the pipeline runs, and releases it at the end or when its process stops. A
dead owner's lease simply expires, and the next process that looks (a restarted server, a
detached watcher, a client following the job) takes over from what the registry recorded.
While it holds the lease the driver also notices a cancel asked for by another process before
the job was submitted, and stops the pipeline.

A full disk under the data dir (SQLite's "database or disk is full", ENOSPC) fails whatever the
pipeline was writing; the driver keeps its lease, waits (1 s doubling to 30 s, for up to
``FULL_DISK_PATIENCE_S``) and runs the pipeline again from what the registry recorded, as a new
owner would. A driver that died of it (its failure could not be recorded either) left its job
``running`` until some process restarted.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import uuid

from j2c_server.config import J2CSettings
from j2c_server.core.backoff import Backoff, retry_async
from j2c_server.core.coalesce import next_tick_s
from j2c_server.core.errors import Conflict, J2CError, disk_full_to_j2c
from j2c_server.jobs.children import ChildJobs, Family
from j2c_server.jobs.clients import Clients
from j2c_server.jobs.drive.pipeline import Pipeline
from j2c_server.jobs.drive.watch import Log
from j2c_server.jobs.failure import pipeline_failure
from j2c_server.jobs.fanout import EventBus
from j2c_server.jobs.journal import Journal
from j2c_server.jobs.stage_text import describe
from j2c_server.registry.event_rows import EventDraft
from j2c_server.registry.job_registry import Registry
from j2c_server.registry.leases import LeaseLost
from j2c_server.usage.writer import job_ended
from j2c_server.wire.api import EventKind, JobRecord, JobStatus, StageState

LEASE_TTL_S = 10.0
RENEW_EVERY_S = 3.0
CHECK_EVERY_S = 1.0
FULL_DISK_PATIENCE_S = 600.0


def new_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class JobDriver:
    """Runs one job's pipeline in this process for as long as it holds the job's lease."""

    def __init__(
        self,
        job_id: str,
        *,
        owner: str,
        registry: Registry,
        bus: EventBus,
        settings: J2CSettings,
        clients: Clients,
        log: Log,
        children: ChildJobs,
        family: Family,
    ) -> None:
        self.job_id = job_id
        self.owner = owner
        self.registry = registry
        self.log = log
        self.journal = Journal(registry, bus, job_id, owner=owner)
        self.settings = settings
        self.clients = clients
        self.children = children
        self.family = family
        self.pipeline = self._pipeline()
        self.task: asyncio.Task[None] | None = None
        self._stop_reason: str | None = None

    def interrupt_for_cancel(self) -> bool:
        """Stop a job that was not submitted yet; False once submitting began (then the
        scheduler is asked to cancel instead)."""
        if self.pipeline.submitting or self.task is None or self.task.done():
            return False
        self._stop_reason = "cancel"
        self.task.cancel()
        return True

    async def run(self) -> None:
        """Take the lease and run the pipeline; return at once if another process drives the
        job. The caller keeps this coroutine's task in ``self.task``."""
        acquiring = asyncio.ensure_future(
            self.registry.leases.acquire(self.job_id, self.owner, LEASE_TTL_S)
        )
        try:
            acquired = await asyncio.shield(acquiring)
        except asyncio.CancelledError:
            # Stopped while the acquire ran in its thread (a CLI that leaves at once: `submit
            # --no-wait`). The acquire is let finish first (a release that ran before its
            # commit would leave the lease taken), then what it took is given back, so the
            # detached watcher takes over at once instead of after the lease's time.
            with contextlib.suppress(Exception):
                if await acquiring:
                    await self.registry.leases.release(self.job_id, self.owner)
            raise
        if not acquired:
            return
        keeper = asyncio.create_task(self._keep_lease())
        ended_here = False  # this driver saw the job to its end (not another process)
        try:
            ended_here = not (await self.registry.jobs.get(self.job_id)).status.terminal
            await retry_async(self._run_pipeline, self._full_disk_backoff())
        except asyncio.CancelledError:
            if self._stop_reason is None:
                raise  # the service is stopping: leave the job to the next owner
            ended_here = self._stop_reason == "cancel"
            if self._stop_reason == "cancel":
                await self._record(JobStatus.cancelled, "cancelled before it was submitted")
        except LeaseLost:
            ended_here = False
            self.log.info("j2c: job %s is driven by another process now", self.job_id)
        except J2CError as exc:
            await self._fail(exc.message, exc.to_dict(), exc.hint)
        except Exception as exc:
            self.log.exception("j2c: job %s failed in the pipeline", self.job_id)
            await self._fail(f"internal error: {type(exc).__name__}: {exc}", {"error": "internal"})
        finally:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
            await self.registry.leases.release(self.job_id, self.owner)
        if ended_here:
            await self._account()

    async def _run_pipeline(self) -> None:
        """A pipeline run from what the registry recorded (again after a full disk)."""
        self.pipeline = self._pipeline()
        await self.pipeline.run()

    def _pipeline(self) -> Pipeline:
        return Pipeline(
            self.settings, self.journal, self.clients, self.log, self.children, self.family
        )

    def _full_disk_backoff(self) -> Backoff:
        def on_retry(exc: BaseException, attempt: int, delay: float) -> None:
            self.log.warning(
                "j2c: job %s: %s; running its pipeline again in %.0f s (try %d)",
                self.job_id,
                disk_full_to_j2c(exc, str(self.settings.data_path())),
                delay,
                attempt,
            )

        return Backoff(
            retryable=lambda exc: disk_full_to_j2c(exc, "") is not None,
            on_retry=on_retry,
            attempts=int(FULL_DISK_PATIENCE_S / 30) + 5,  # 1 s doubling to 30 s: the patience
            base_s=1.0,
            max_s=30.0,
        )

    async def _account(self) -> None:
        await account_ended(self.job_id, self.registry, self.settings, self.clients, self.log)

    async def _keep_lease(self) -> None:
        renewed = time.monotonic()
        while True:
            # On the shared tick: every driver's check of this process in one read.
            await asyncio.sleep(next_tick_s(CHECK_EVERY_S))
            if time.monotonic() - renewed >= RENEW_EVERY_S:
                try:
                    kept = await self.registry.leases.renew(self.job_id, self.owner, LEASE_TTL_S)
                except Exception as exc:
                    if disk_full_to_j2c(exc, "") is None:
                        raise
                    continue  # a full disk: renewed at the next tick, while the lease lasts
                if not kept:
                    self._stop("lease lost")
                    return
                renewed = time.monotonic()
            state = await self.registry.jobs.state(self.job_id)
            if state.status == JobStatus.cancelling and self.interrupt_for_cancel():
                return

    def _stop(self, reason: str) -> None:
        self.log.warning("j2c: job %s: %s; stopping this watcher", self.job_id, reason)
        self._stop_reason = reason
        if self.task is not None:
            self.task.cancel()

    async def _record(self, status: JobStatus, message: str) -> None:
        with contextlib.suppress(Conflict, LeaseLost):
            await self.journal.status(status, message)

    async def _fail(self, message: str, detail: dict[str, object], hint: str | None = None) -> None:
        """The stage that was running failed (its event and record say so, with the reason),
        then the error and the job's failed status (its ``failure``: the error's words)."""
        failure = pipeline_failure(message, hint)

        def with_failure(record: JobRecord) -> None:
            record.failure = failure

        def mark_failed(record: JobRecord) -> None:
            for stage in record.stages.values():
                if stage.state == StageState.started:
                    stage.state = StageState.failed
                    stage.finished_at = time.time()
                    stage.reason = message

        with contextlib.suppress(Conflict, LeaseLost):
            record = await self.registry.jobs.get(self.job_id)
            running = [s.stage for s in record.stages.values() if s.state == StageState.started]
            failed: list[EventDraft] = [
                {
                    "kind": EventKind.stage,
                    "stage": stage,
                    "state": StageState.failed,
                    "text": describe(stage, StageState.failed, {"error": message}),
                    "data": {"error": message},
                }
                for stage in running
            ]
            if failed:
                await self.journal.write(failed, change=mark_failed)
            await self.journal.error(message, dict(detail))
            await self.journal.status(
                JobStatus.failed,
                message,
                change=with_failure,
                data={"failure": failure.model_dump(mode="json", exclude_none=True)},
            )


async def account_ended(
    job_id: str, registry: Registry, settings: J2CSettings, clients: Clients, log: Log
) -> None:
    """The ended job's usage record and metrics (never failing the job), then marked in the
    registry as accounted for: a process killed before this leaves the job to the next
    service's sweep of unaccounted jobs (``registry/accounting.py``)."""
    try:
        record = await registry.jobs.get(job_id)
        if record.status.terminal:
            await job_ended(settings, clients.store(), record, log)
            await registry.accounting.mark(job_id)
    except Exception:  # accounting must not fail the job
        log.exception("j2c: usage of job %s not recorded", job_id)
