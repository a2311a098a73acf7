"""A finished or running job with a log, written through the registry as the pipeline writes
one (the compaction tests, ``tests/test_event_archive.py`` and ``tests/api``)."""

from __future__ import annotations

import time
from typing import Any

from j2c_server.registry.job_registry import Registry
from j2c_server.wire.api import EventKind, JobRecord, JobRequest, JobStatus


async def make_job(
    registry: Registry,
    job_id: str,
    lines: int,
    *,
    finish: bool = True,
    lease_to: str = "",
    batch_rows: bool | None = None,
) -> None:
    """A job as the pipeline writes one: stage events, log lines (with text that JSON must
    escape, unicode, an empty line, defaults left out), then its terminal status. The lines
    are stored one row per batch (``batch_rows``), one row per event, or (None) in turn."""
    now = time.time()
    record = JobRecord(
        id=job_id,
        name="train.py",
        key=f"key-{job_id}",
        status=JobStatus.running,
        request=JobRequest(code_path="/p", call_path="/p/train.py"),
        scheduler="local",
        created_at=now,
        updated_at=now,
    )
    await registry.jobs.create_or_attach(record, {"kind": EventKind.status, "status": "running"})
    if lease_to:  # a server in this process must not take it over
        await registry.leases.acquire(job_id, lease_to, 3600)
    drafts: list[dict[str, Any]] = [
        {"kind": EventKind.stage, "stage": "pack", "state": "finished", "data": {"bytes": 12}}
    ]
    for i in range(lines):
        text = ['line "quoted" \\ tab\t', "é€ 😀", "", "x" * 5000][i % 4] + f" {i}"
        drafts.append(
            {"kind": EventKind.log, "stream": "stderr" if i % 7 else "stdout", "text": text}
        )
    # Both shapes of stored rows, as a registry from before batch rows holds them: a chunk
    # written with a record's append (one row per event) and one as a watcher writes its
    # batches (one row per append).
    for turn, start in enumerate(range(0, len(drafts), 50)):
        chunk = drafts[start : start + 50]
        if batch_rows if batch_rows is not None else turn % 2:
            await registry.events.append_many(job_id, chunk)
        else:
            await registry.events.append(job_id, chunk)
    if finish:
        await registry.events.append(
            job_id,
            [{"kind": EventKind.status, "status": JobStatus.failed}],
            change=lambda r: setattr(r, "status", JobStatus.failed),
        )
