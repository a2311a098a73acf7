"""A sweep: one send → one parent job and N child jobs, packed and uploaded once.

- ``submit_sweep``: the grid is expanded (every bad grid refused before anything is written),
  the project scanned once, and the parent created by the send rule (an unchanged re-send
  attaches to it: the sweep spec is part of the request key); then one child record per
  variant, each a normal job (own log, status, results, cancel) that names its parent.
- The parent's pipeline packs and uploads once; ``with_variants`` writes the variant table into
  that one manifest (format 5; 7 when its rows carry retries, which j2c-unpack applies on every
  backend), and ``run_children`` submits every child pinned to it by ``--manifest-digest``: as
  one native array job where the backend has them (each task picks its row by the scheduler's
  index variable; the scheduler throttles to ``max_parallel``), else one job per child with
  ``--variant N`` (at most ``max_parallel`` going at once); then it keeps the parent's
  aggregate status until every child has ended.
- ``cancel_children``: cancelling the parent cancels every child.

The variant table is computed from the parent's request as sent (``sweep_grid.expand``), so an
edit in the lab after the send never reaches a queued variant: they all run the uploaded layers.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from typing import TYPE_CHECKING, TypeGuard

from j2c_server.core.errors import Conflict, InvalidInput
from j2c_server.core.j2c_lines import TAG_ENV
from j2c_server.jobs.send.inputs import job_spec, line_tag_of, presigned_manifest
from j2c_server.jobs.send.presigned_outputs import outputs_policy
from j2c_server.jobs.send.rule import job_key
from j2c_server.schedulers.base import ArrayScheduler, Scheduler
from j2c_server.sweeps.grid import expand
from j2c_server.unpack.variant import PLACEHOLDER
from j2c_server.wire.api import Capabilities, EventKind, JobHandle, JobRecord, JobRequest, JobStatus
from j2c_server.wire.manifest import (
    MANIFEST_FORMAT_VERSION_RETRIES,
    MANIFEST_FORMAT_VERSION_VARIANTS,
    Manifest,
    Variant,
)
from j2c_server.wire.sweep import SweepInfo

if TYPE_CHECKING:
    from j2c_server.config import J2CSettings
    from j2c_server.jobs.audit import Actor
    from j2c_server.jobs.children import Family
    from j2c_server.jobs.journal import Journal
    from j2c_server.jobs.service import JobService
    from j2c_server.storage.base import ObjectStore

POLL_S = 0.5
# The aggregate's words list these in this order, the ended ones first.
_ORDER = [
    JobStatus.succeeded,
    JobStatus.failed,
    JobStatus.cancelled,
    JobStatus.lost,
    JobStatus.running,
    JobStatus.cancelling,
    JobStatus.queued,
    JobStatus.submitted,
    JobStatus.pending,
]


def variant_table(request: JobRequest, max_variants: int) -> tuple[list[str], list[Variant]]:
    if request.sweep is None:
        raise ValueError("not a sweep")
    if request.sweep.retries and request.resources.nodes > 1:
        # j2c-unpack re-runs a variant on its node: one node's re-run would not meet the others.
        raise InvalidInput(
            f"sweep: retries re-run a variant in place on its node; the {request.resources.nodes} "
            "nodes of a multi-node variant would not re-run together: send it with retries 0",
            field="sweep",
        )
    return expand(request.sweep, request.args, request.env, max_variants=max_variants)


def with_variants(manifest: Manifest, record: JobRecord, limit: int) -> Manifest:
    """The parent's manifest with its variant table; any other job's unchanged."""
    if not record.is_parent():
        return manifest
    _, table = variant_table(record.request, limit)
    # Retries need a j2c-unpack that applies them: an older one refuses the newer format.
    needed = (
        MANIFEST_FORMAT_VERSION_RETRIES
        if any(row.retries for row in table)
        else MANIFEST_FORMAT_VERSION_VARIANTS
    )
    version = max(manifest.format_version, needed)
    return manifest.model_copy(update={"variants": table, "format_version": version})


def aggregate(children: list[JobRecord]) -> tuple[JobStatus, dict[str, int], str]:
    """The parent's status, its counts by status and their words ('3/6 succeeded, 1 running')."""
    counts = Counter(child.status for child in children)
    total = len(children)
    words = [f"{counts[s]} {s.value}" for s in _ORDER if counts[s] and s != JobStatus.succeeded]
    summary = ", ".join([f"{counts[JobStatus.succeeded]}/{total} succeeded", *words])
    if all(child.status.terminal for child in children):
        if counts[JobStatus.succeeded] == total:
            status = JobStatus.succeeded
        elif counts[JobStatus.cancelled] and not counts[JobStatus.failed]:
            status = JobStatus.cancelled
        else:
            status = JobStatus.failed
    elif any(c.status in (JobStatus.running, JobStatus.cancelling) for c in children):
        status = JobStatus.running
    else:
        status = JobStatus.queued if counts[JobStatus.queued] else JobStatus.submitted
    return status, {s.value: n for s, n in counts.items()}, summary


async def submit_sweep(
    service: JobService, request: JobRequest, actor: Actor | None = None
) -> JobRecord:
    """The parent's record; its children are created with it unless the send attached."""
    # Bad grids (and one over sweep.max_variants) fail here, before any scan.
    keys, table = variant_table(request, service.settings.sweep.max_variants)
    record = await service.submit(request, actor, sweep_keys=keys, sweep_size=len(table))
    if record.decision is not None and record.decision.attached:
        return record
    family = service.family()
    children: list[str] = []
    for row in table:
        child = _child(record, keys, row)
        first = {"kind": EventKind.status, "status": JobStatus.pending, "text": child.message}
        children.append((await family.create(child, first)).id)

    def apply(job: JobRecord) -> None:
        if job.sweep is not None:
            job.sweep.children = list(children)

    with contextlib.suppress(Conflict):
        await family.journal(record.id).write([], change=apply)
    return await service.get(record.id)


def _child(parent: JobRecord, keys: list[str], row: Variant) -> JobRecord:
    request = parent.request.model_copy(
        update={"args": list(row.args), "env": {**parent.request.env, **row.env}, "sweep": None}
    )
    values = ", ".join(f"{k}={v}" for k, v in row.params.items())
    return parent.model_copy(
        update={
            "id": f"{parent.id}-{row.index}",
            "name": f"{parent.name} [{values}]",
            "key": job_key(f"{parent.key}:{row.index}", {}),
            "request_key": None,
            "request": request,
            "message": "waiting for the sweep's upload",
            "decision": None,
            "stages": {},
            "sweep": SweepInfo(
                sweep_id=parent.id,
                parent=parent.id,
                index=row.index,
                params=dict(row.params),
                keys=keys,
                size=parent.sweep.size if parent.sweep else 0,
                max_parallel=parent.sweep.max_parallel if parent.sweep else None,
            ),
        }
    )


async def cancel_children(service: JobService, record: JobRecord, actor: Actor | None) -> None:
    if not record.is_parent() or record.sweep is None:
        return
    for child_id in record.sweep.children:
        with contextlib.suppress(Conflict):
            await service.cancel(child_id, actor)


async def run_children(
    family: Family, journal: Journal, record: JobRecord, manifest: Manifest, manifest_uri: str
) -> None:
    """Submit every child pinned to ``manifest`` (``max_parallel`` at a time) and keep the
    parent's aggregate until all have ended; returns with the parent's final status written
    (through ``journal``, the parent's writer under its lease)."""
    info = (await family.get(record.id)).sweep
    # The send writes the children just after the parent: wait for all of them.
    while info is not None and len(info.children) < info.size:
        await asyncio.sleep(POLL_S / 5)
        info = (await family.get(record.id)).sweep
    assert info is not None
    store = family.store()
    limit = info.max_parallel or max(1, len(info.children))
    pending = list(info.children)
    scheduler = family.scheduler(record.scheduler)
    if native_array(scheduler, family.settings, record):
        await journal.status(
            JobStatus.submitted, f"submitting {len(info.children)} variants as one array job"
        )
        await _submit_array(family, record, info, manifest, manifest_uri, store, scheduler)
        pending = []  # the scheduler throttles the array's tasks itself
    else:
        await journal.status(JobStatus.submitted, f"submitting {len(info.children)} variants")
    last = ""
    while True:
        parent = await family.get(record.id)
        children = [await family.get(child_id) for child_id in info.children]
        going = sum(1 for c in children if c.handle is not None and not c.status.terminal)
        stopping = parent.status == JobStatus.cancelling
        while pending and going < limit and not stopping:
            child = next(c for c in children if c.id == pending[0])
            pending.pop(0)
            if child.handle is not None or child.status != JobStatus.pending:
                continue
            await _submit_child(family, child, manifest, manifest_uri, store)
            going += 1
        children = [await family.get(child_id) for child_id in info.children]
        status, counts, summary = aggregate(children)
        if summary != last or status.terminal:
            last = summary

            def apply(job: JobRecord, counts: dict[str, int] = counts, s: str = summary) -> None:
                if job.sweep is not None:
                    job.sweep.counts, job.sweep.summary = counts, s

            if status.terminal:
                await _finish(family.settings, journal, parent, status, summary, apply)
                return
            if parent.status != status and not stopping:
                await journal.status(status, summary, change=apply)
            else:
                await journal.write([], change=apply)
        await asyncio.sleep(POLL_S)


def native_array(
    scheduler: Scheduler, settings: J2CSettings, record: JobRecord
) -> TypeGuard[ArrayScheduler]:
    """Whether the sweep goes to its scheduler as one array job: a backend that has arrays,
    single-node variants, and jobs that read the store itself (a presigned job's manifest URL
    and upload policy are each variant's own: those run as N jobs)."""
    return (
        isinstance(scheduler, ArrayScheduler)
        and getattr(type(scheduler), "capabilities", Capabilities()).arrays
        and record.request.resources.nodes == 1
        and not settings.storage.presign_for_jobs
    )


async def _submit_array(
    family: Family,
    parent: JobRecord,
    info: SweepInfo,
    manifest: Manifest,
    manifest_uri: str,
    store: ObjectStore,
    scheduler: ArrayScheduler,
) -> None:
    """One array job for every variant; each child gets its task's handle. The command and env
    are the same for all tasks: each picks its row by the scheduler's index variable, and
    j2c-unpack fills ``{variant}`` in the job id and outputs address (unpack/variant.py)."""
    children = [await family.get(child_id) for child_id in info.children]
    if all(child.handle is not None for child in children):
        return
    bare = parent.request.model_copy(update={"args": [], "sweep": None})
    template = parent.model_copy(update={"id": f"{parent.id}-{PLACEHOLDER}", "request": bare})
    spec = job_spec(
        family.settings, template, manifest_uri, store, manifest_digest=manifest.digest()
    )
    cut = spec.command.index("--")
    pick = ["--variant-env", scheduler.array_index_env]
    spec = spec.model_copy(
        update={
            "command": [*spec.command[:cut], *pick, *spec.command[cut:]],
            "key": f"j2c-{parent.id}",
            "job_id": parent.id,
            # Every variant's watch knows its lines by the sweep's tag, as its own job would.
            "env": {**spec.env, TAG_ENV: line_tag_of(parent)},
        }
    )
    try:
        handles = await scheduler.submit_array(spec, len(children), info.max_parallel)
    except Exception as exc:  # the array's refusal ends every variant still waiting for it
        for child in children:
            if child.handle is None and child.status == JobStatus.pending:
                with contextlib.suppress(Conflict):
                    await family.journal(child.id).status(JobStatus.failed, f"submit failed: {exc}")
        return
    for child, handle in zip(children, handles, strict=True):
        if child.handle is not None:
            continue
        if child.status != JobStatus.pending:  # cancelled before the array existed
            with contextlib.suppress(Exception):
                await scheduler.cancel(handle)
            continue
        await _record_task(family, child, handle, manifest_uri)
        family.drive(child.id)


async def _record_task(
    family: Family, child: JobRecord, handle: JobHandle, manifest_uri: str
) -> None:
    def apply(job: JobRecord) -> None:
        job.handle = handle
        job.manifest_uri = manifest_uri

    index = child.sweep.index if child.sweep is not None else 0
    array_id = handle.data.get("array", "")
    words = f"submitted as {handle.id} (task {index} of the sweep's array job {array_id})"
    with contextlib.suppress(Conflict):
        await family.journal(child.id).status(JobStatus.submitted, words, change=apply)


async def _finish(
    settings: J2CSettings,
    journal: Journal,
    parent: JobRecord,
    status: JobStatus,
    summary: str,
    apply: object,
) -> None:
    from j2c_server.sweeps.tracking import finish_sweep_run

    results = None
    with contextlib.suppress(Exception):  # tracking never decides the sweep's status
        if parent.results is not None and parent.results.tracking is not None:
            results = await finish_sweep_run(settings, parent, status)

    def change(job: JobRecord) -> None:
        apply(job)  # type: ignore[operator]
        if results is not None:
            job.results = results

    await journal.status(status, summary, change=change)


async def _submit_child(
    family: Family, child: JobRecord, manifest: Manifest, manifest_uri: str, store: ObjectStore
) -> None:
    settings = family.settings
    index = child.sweep.index if child.sweep is not None else 0
    job_manifest, pinned = (
        await presigned_manifest(settings, store, manifest, child.id)
        if settings.storage.presign_for_jobs
        else (manifest_uri, manifest.digest())
    )
    # The row's args come from the manifest: none after "--" here, or they would run twice.
    bare = child.model_copy(update={"request": child.request.model_copy(update={"args": []})})
    post = (
        await outputs_policy(settings, store, child) if settings.storage.presign_for_jobs else None
    )
    spec = job_spec(settings, bare, job_manifest, store, manifest_digest=pinned, outputs_post=post)
    cut = spec.command.index("--")
    command = [*spec.command[:cut], "--variant", str(index), *spec.command[cut:]]
    spec = spec.model_copy(update={"command": command})
    journal = family.journal(child.id)
    try:
        handle = await family.scheduler(child.scheduler).submit(spec)
    except Exception as exc:  # one variant's refusal ends that variant, not the sweep
        with contextlib.suppress(Conflict):
            await journal.status(JobStatus.failed, f"submit failed: {exc}")
        return

    def apply(job: JobRecord) -> None:
        job.handle = handle
        job.manifest_uri = manifest_uri

    with contextlib.suppress(Conflict):
        await journal.status(JobStatus.submitted, f"submitted as {handle.id}", change=apply)
    family.drive(child.id)
