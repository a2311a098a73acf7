"""A job's attempts: when a run that a preemption or a lost node ended runs again, and how.

One job, one id, one log stream, N attempts (docs/pipeline.md *Attempts*). After the watch stage
the pipeline asks :meth:`Attempts.after` what the end it saw means:

- **Another attempt** when the backend says the job was interrupted (``SchedulerState.
  interrupted``: Slurm ``PREEMPTED``/``NODE_FAIL``/``BOOT_FAIL``, a Kubernetes pod disruption, a
  container killed or gone without a cancel from j2c, a Ray job whose node died, a local
  runner killed), nobody asked to cancel it, and it has attempts left (``1 + max_attempts``:
  the request's, else ``resume.max_attempts``). Never for the user's code failing (a sweep's
  ``retries`` are for that), a time limit or a cancel: those end the job as before.
- **The restore plan** (unpack/restore.py's format): the newest checkpoint entry of the last
  outputs index whose sha256 the job's log holds (the index is trusted by that digest, as the
  results stage trusts it), and the rest of that index to carry over; written to
  ``jobs/<id>/attempts/<n>/restore.json`` and pinned on the next attempt's command line by its
  own sha256. No trusted index, or none with a checkpoint: the attempt starts from scratch, and
  the boundary line says why.
- **The boundary**: one log line ("attempt 1 of 4 ended: preempted ... ; attempt 2 resumes from
  checkpoints/step_12.pt saved 14:01:55"), the ended attempt's record (how, where, when), the
  next one's (resumed from what), the status ``queued`` while the backoff runs
  (``resume.backoff_s``, doubled per attempt, at most 10 minutes), and the log cursor reset
  (the new run's log starts afresh). The old run is released first: a lost one cancelled (a
  local runner's orphaned job killed), every one collected (a container removed).
- **The next attempt**: the same manifest (nothing is packed or uploaded again), a spec of its
  own (``key`` ``j2c-<id>-a<n>``, ``J2C_ATTEMPT``, ``--restore``), the same MLflow run tagged
  ``j2c.attempt``. A process that takes the job over during the backoff finds the plan in the
  record and submits the same attempt (its key makes a retried submit adopt it).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from j2c_server.config import J2CSettings
from j2c_server.core.units import byte_size, count
from j2c_server.jobs.clients import Clients
from j2c_server.jobs.drive.watch import Log
from j2c_server.jobs.journal import CancelPending, Journal, combine, status_change
from j2c_server.jobs.results import (
    INDEX_DIGEST_MARK,
    OutputsIndex,
    logged_digest,
    outputs_prefix,
    read_index,
)
from j2c_server.jobs.send.inputs import job_spec, presigned_manifest
from j2c_server.jobs.send.presigned_outputs import outputs_policy, told_to_upload
from j2c_server.jobs.tracking import start_run, tag_attempt
from j2c_server.registry.event_rows import EventDraft
from j2c_server.schedulers.base import JobSpec, SchedulerState
from j2c_server.storage.base import ObjectStore, manifest_key
from j2c_server.wire.api import (
    AttemptRecord,
    EventKind,
    JobHandle,
    JobRecord,
    JobStatus,
    LineLevel,
    LineOrigin,
)
from j2c_server.wire.manifest import Manifest

# An attempt's boundary is j2c's line, a warning: the job's run ended through no fault of its
# own, and every front end shows j2c's warnings by default (docs/pipeline.md, Attempts).
_J2C_LINE: EventDraft = {
    "kind": EventKind.log,
    "origin": LineOrigin.j2c,
    "level": LineLevel.warning,
    "phase": "resume",
}

PLAN_FORMAT = 1
MAX_BACKOFF_S = 600.0
WAIT_STEP_S = 0.5  # how often the backoff looks for a cancel
_MANIFEST_DIGEST = re.compile(r"/manifests/sha256/([0-9a-f]{64})\.json$")

Submit = Callable[[JobRecord, JobSpec], Awaitable[JobHandle | None]]
Next = JobHandle | SchedulerState | None


def attempts_allowed(settings: J2CSettings, record: JobRecord) -> int:
    """How many attempts the job may have in all: 1 + its max_attempts (the request's, else
    ``resume.max_attempts``)."""
    chosen = record.request.max_attempts
    return 1 + (settings.resume.max_attempts if chosen is None else chosen)


def restore_key(job_id: str, attempt: int) -> str:
    return f"jobs/{job_id}/attempts/{attempt}/restore.json"


def next_pending(record: JobRecord) -> bool:
    """Whether the job is between attempts: the next one is recorded, not submitted yet."""
    last = record.attempts[-1] if record.attempts else None
    return (
        record.attempt > 1
        and last is not None
        and last.number == record.attempt
        and last.scheduler_job_id is None
    )


def backoff_s(settings: J2CSettings, attempt: int) -> float:
    """The wait before attempt ``attempt`` (2 and up): ``backoff_s``, doubled each time."""
    return float(min(MAX_BACKOFF_S, settings.resume.backoff_s * 2 ** max(0, attempt - 2)))


class Attempts:
    """The attempt logic of one job's pipeline (it holds the job's lease)."""

    def __init__(
        self, settings: J2CSettings, journal: Journal, clients: Clients, log: Log, submit: Submit
    ) -> None:
        self.settings = settings
        self.journal = journal
        self.registry = journal.registry
        self.clients = clients
        self.log = log
        self.submit = submit  # the pipeline's submit stage

    @property
    def job_id(self) -> str:
        return self.journal.job_id

    async def after(self, handle: JobHandle, state: SchedulerState) -> Next:
        """What follows the end ``state`` of the run ``handle``: the next attempt's handle, a
        state to end the job with instead of ``state``, or None (end with ``state``)."""
        record = await self.registry.jobs.get(self.job_id)
        if (
            record.status == JobStatus.cancelling
            or not state.interrupted
            or state.status not in (JobStatus.failed, JobStatus.lost)
            or record.is_parent()
        ):
            return None
        allowed = record.attempts_allowed or attempts_allowed(self.settings, record)
        ended = _ended_words(record.attempt, allowed, state)
        if record.attempt >= allowed:
            words = (
                "resume.max_attempts is 0: not resumed"
                if allowed == 1
                else f"no attempts left (max_attempts {allowed - 1})"
            )
            await self._line(f"{ended}; {words}", {"ended": record.attempt})
            return state.model_copy(update={"message": f"{state.message or ended}; {words}"})
        number = record.attempt + 1
        await self._release(handle, state)
        planned = await self._restore_plan(record, number)
        delay = backoff_s(self.settings, number)
        try:
            record = await self._boundary(record, state, number, allowed, planned, delay, ended)
        except CancelPending:
            return None
        return await self.start(record, handle)

    async def start(self, record: JobRecord, previous: JobHandle) -> JobHandle | SchedulerState:
        """The recorded next attempt, once its backoff is over; a cancel meanwhile ends the
        job (``previous``'s results are still collected)."""
        attempt = record.attempts[-1]
        while attempt.starts_at is not None and time.time() < attempt.starts_at:
            if (await self.registry.jobs.state(self.job_id)).status == JobStatus.cancelling:
                return SchedulerState(
                    status=JobStatus.cancelled,
                    message=f"cancelled before attempt {attempt.number} started",
                )
            await asyncio.sleep(min(WAIT_STEP_S, attempt.starts_at - time.time()))
        record = await self.registry.jobs.get(self.job_id)
        spec = await self._spec(record, attempt)
        handle = await self.submit(record, spec)
        if handle is None:  # cancelled at the last moment
            return SchedulerState(
                status=JobStatus.cancelled, message=f"cancelled before attempt {attempt.number}"
            )
        return handle

    # ------------------------------------------------------------------ the boundary

    async def _release(self, handle: JobHandle, state: SchedulerState) -> None:
        """The ended run let go of: a lost one cancelled (what may still run of it, e.g. a
        local job whose supervisor was killed), then its results read (a backend that keeps
        a finished run until then removes it). Best effort: the next attempt goes on."""
        scheduler = self.clients.scheduler(handle.scheduler)
        try:
            if state.status == JobStatus.lost:
                await scheduler.cancel(handle)
            await scheduler.results(handle)
        except Exception as exc:
            self.log.warning("j2c: job %s: releasing run %s: %s", self.job_id, handle.id, exc)

    async def _boundary(
        self,
        record: JobRecord,
        state: SchedulerState,
        number: int,
        allowed: int,
        planned: _Planned,
        delay: float,
        ended: str,
    ) -> JobRecord:
        now = time.time()
        starts_at = now + delay
        resumes = planned.words(number)
        text = f"{ended}; {resumes}, in {delay:.0f} s"
        at = time.strftime("%H:%M:%S", time.localtime(starts_at))
        message = f"{state.interrupted}; attempt {number} of {allowed} starts at {at}"

        def apply(job: JobRecord) -> None:
            current = _current(job)
            current.ended_at = current.ended_at or now
            current.status = state.status
            current.reason = state.interrupted
            current.interrupted = True
            current.node = state.node or current.node
            job.attempts.append(
                AttemptRecord(
                    number=number,
                    resumed_from=planned.entry,
                    resumed_saved_at=planned.saved_at,
                    restored_bytes=planned.bytes,
                    starts_at=starts_at,
                    restore_key=planned.key,
                    restore_digest=planned.digest,
                )
            )
            job.attempt = number
            job.attempts_allowed = allowed

        drafts: list[EventDraft] = [
            {
                **_J2C_LINE,
                "text": text,
                "data": {
                    "attempt": {
                        "ended": number - 1,
                        "next": number,
                        "of": allowed,
                        "reason": state.interrupted,
                        "node": state.node,
                        "resumed_from": planned.entry,
                        "saved_at": planned.saved_at,
                        "restore_bytes": planned.bytes,
                        "starts_in_s": round(delay, 3),
                    }
                },
            },
            {"kind": EventKind.status, "status": JobStatus.queued, "text": message},
        ]
        # The next run's log starts afresh: the cursor of the last one means nothing to it.
        return await self.journal.write(
            drafts, change=combine(status_change(JobStatus.queued, message), apply), log_cursor=""
        )

    async def _line(self, text: str, data: dict[str, Any]) -> None:
        await self.journal.write([{**_J2C_LINE, "text": text, "data": {"attempt": data}}])

    # ------------------------------------------------------------------ the restore plan

    async def _restore_plan(self, record: JobRecord, number: int) -> _Planned:
        """The plan of attempt ``number`` written to the store (None in it: nothing to
        restore, with why)."""
        presign = self.settings.storage.presign_for_jobs
        store = self.clients.store()
        if presign and not told_to_upload(record):
            return _Planned(why="the job could not upload its outputs (presigned, no policy)")
        # j2c's own line only: a line the job printed names no index (docs/security.md).
        line = await self.registry.events.last_log_line_with(
            self.job_id, INDEX_DIGEST_MARK, j2c_only=True
        )
        index, problem = await read_index(store, self.job_id, logged_digest([line] if line else []))
        if index is None:
            return _Planned(why=problem or "no checkpoint was synced")
        newest = index.checkpoints[0] if index.checkpoints else None
        restored = set(newest.files) if newest is not None else set()
        files = [item for item in index.files if item.name in restored]
        plan: dict[str, Any] = {
            "format": PLAN_FORMAT,
            "attempt": number,
            "entry": newest.entry if newest else None,
            "saved_at": newest.saved_at if newest else None,
            "files": [
                {
                    **item.model_dump(),
                    **({"url": await _presigned(store, record.id, item.name)} if presign else {}),
                }
                for item in files
            ],
            "carry": {
                "files": [item.model_dump() for item in index.files if item.name not in restored],
                "checkpoints": [entry.model_dump() for entry in index.checkpoints[1:]],
            },
        }
        body = json.dumps(plan, sort_keys=True).encode()
        key = restore_key(record.id, number)
        await store.put_bytes(key, body)
        return _Planned(
            key=key,
            digest="sha256:" + hashlib.sha256(body).hexdigest(),
            entry=newest.entry if newest else None,
            saved_at=newest.saved_at if newest else None,
            bytes=sum(item.size for item in files),
            files=len(files),
            why=None if newest else _no_checkpoint(index),
        )

    # ------------------------------------------------------------------ the next spec

    async def _spec(self, record: JobRecord, attempt: AttemptRecord) -> JobSpec:
        """Attempt ``attempt``'s spec: the first one's, from the same manifest, with a key of
        its own, ``J2C_ATTEMPT`` and its restore plan."""
        store = self.clients.store()
        manifest, digest = await _manifest(store, record)
        presign = self.settings.storage.presign_for_jobs
        job_manifest, pinned = (
            await presigned_manifest(self.settings, store, manifest, record.id)
            if presign
            else (record.manifest_uri or "", digest)
        )
        post = await outputs_policy(self.settings, store, record) if presign else None
        child = record.is_child()
        # A variant's args come from the manifest's row (as its first submit: sweeps/send.py).
        bare = record.model_copy(update={"request": record.request.model_copy(update={"args": []})})
        spec = job_spec(
            self.settings,
            bare if child else record,
            job_manifest,
            store,
            manifest_digest=pinned,
            outputs_post=post,
        )
        extra: list[str] = []
        if child and record.sweep is not None:
            extra += ["--variant", str(record.sweep.index)]
        if attempt.restore_key is not None and attempt.restore_digest is not None:
            where = (
                await store.presign(
                    attempt.restore_key, expires_s=self.settings.storage.presign_expiry_s
                )
                if presign
                else None
            ) or store.uri(attempt.restore_key)
            extra += ["--restore", where, "--restore-digest", attempt.restore_digest]
        cut = spec.command.index("--")
        spec = spec.model_copy(
            update={
                "command": [*spec.command[:cut], *extra, *spec.command[cut:]],
                "key": f"j2c-{record.id}-a{attempt.number}",
                "attempt": attempt.number,
                "env": {**spec.env, "J2C_ATTEMPT": str(attempt.number)},
            }
        )
        spec = await start_run(self.settings, self.journal, record, manifest, spec)
        with contextlib.suppress(Exception):  # tracking never holds a job back
            await tag_attempt(self.settings, record, attempt)
        return spec


class _Planned:
    """What the next attempt restores (its plan in the store), or why nothing."""

    def __init__(
        self,
        *,
        key: str | None = None,
        digest: str | None = None,
        entry: str | None = None,
        saved_at: float | None = None,
        bytes: int = 0,
        files: int = 0,
        why: str | None = None,
    ) -> None:
        self.key, self.digest = key, digest
        self.entry, self.saved_at = entry, saved_at
        self.bytes, self.files, self.why = bytes, files, why

    def words(self, number: int) -> str:
        if self.entry is None:
            return f"attempt {number} starts from scratch: {self.why or 'no checkpoint'}"
        saved = time.strftime("%H:%M:%S", time.localtime(self.saved_at)) if self.saved_at else "?"
        return (
            f"attempt {number} resumes from {self.entry} saved {saved} "
            f"({count(self.files, 'file')}, {byte_size(self.bytes)})"
        )


def _ended_words(number: int, allowed: int, state: SchedulerState) -> str:
    node = f" on node {state.node}" if state.node else ""
    at = time.strftime("%H:%M:%S")
    return f"attempt {number} of {allowed} ended: {state.interrupted}{node} at {at}"


def _current(job: JobRecord) -> AttemptRecord:
    """The record of the attempt that runs now (made for a job submitted before attempts were
    recorded, or by its sweep's parent)."""
    if not job.attempts or job.attempts[-1].number != job.attempt:
        job.attempts.append(
            AttemptRecord(
                number=job.attempt,
                scheduler_job_id=job.handle.id if job.handle else None,
                started_at=job.started_at,
            )
        )
    return job.attempts[-1]


def _no_checkpoint(index: OutputsIndex) -> str:
    return (
        "the job synced no checkpoint (nothing in its checkpoint folders: "
        "resume.checkpoint_dirs, --checkpoint-dir)"
        if index.files
        else "the job synced nothing yet"
    )


async def _presigned(store: ObjectStore, job_id: str, name: str) -> str | None:
    return await store.presign(f"{outputs_prefix(job_id)}/{name}")


async def _manifest(store: ObjectStore, record: JobRecord) -> tuple[Manifest, str]:
    """The job's manifest read back from the store, and its digest (``sha256:<hex>``)."""
    found = _MANIFEST_DIGEST.search(record.manifest_uri or "")
    if found is None:
        raise ValueError(f"job {record.id} has no content-addressed manifest to run again")
    digest = f"sha256:{found.group(1)}"
    return Manifest.model_validate_json(await store.get_bytes(manifest_key(digest))), digest
