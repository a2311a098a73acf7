"""Writing usage records to the store, and the two hooks the job's life calls.

:func:`job_submitted` (the pipeline, once the scheduler accepted the job) writes the start
record in the background; :func:`job_ended` (the job's driver, once its record is terminal)
waits for that write, then writes the end record over it and counts the job in the metrics.
A write is retried a few times and a failure is logged and counted
(``j2c_usage_record_failures_total``), never raised: accounting must not fail a job.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from j2c_server.config import J2CSettings
from j2c_server.core.backoff import Backoff, retry_async
from j2c_server.core.version import __version__
from j2c_server.storage.base import ObjectStore
from j2c_server.usage import metrics
from j2c_server.usage.records import StartRecord, UsageRecord, end_record, start_record, usage_key
from j2c_server.wire.api import JobRecord

Log = logging.Logger | logging.LoggerAdapter[logging.Logger]

WRITE_ATTEMPTS = 4
WRITE_BASE_S = 0.5

# Start records still being written, by job: the end record must land after its start.
_pending: dict[str, asyncio.Task[bool]] = {}


async def write_record(
    store: ObjectStore,
    record: StartRecord | UsageRecord,
    log: Log,
    *,
    attempts: int = WRITE_ATTEMPTS,
    base_s: float = WRITE_BASE_S,
) -> bool:
    """Write one record under its key; False (logged, counted) when every try failed."""
    key = usage_key(record.job_id, record.created_at)
    data = record.model_dump_json(exclude_none=True).encode() + b"\n"

    def retrying(exc: BaseException, attempt: int, delay: float) -> None:
        log.info(
            "j2c: usage record of job %s: try %d failed (%s); again in %.1f s",
            record.job_id,
            attempt,
            exc,
            delay,
        )

    try:
        await retry_async(
            lambda: store.put_bytes(key, data),
            Backoff(
                retryable=lambda exc: isinstance(exc, Exception),
                on_retry=retrying,
                attempts=attempts,
                base_s=base_s,
                max_s=5.0,
            ),
        )
    except Exception as exc:  # reported, never raised: the job goes on
        log.warning(
            "j2c: usage record of job %s not written to %s: %s",
            record.job_id,
            store.uri(key),
            exc,
        )
        metrics.usage_record_failed()
        return False
    return True


def job_submitted(settings: J2CSettings, store: ObjectStore, record: JobRecord, log: Log) -> None:
    """Write the start record in the background (the watch stage does not wait for it)."""
    if not settings.usage.enabled:
        return
    task = asyncio.get_running_loop().create_task(
        write_record(store, start_record(record, __version__), log),
        name=f"j2c-usage-start-{record.id}",
    )
    _pending[record.id] = task
    task.add_done_callback(lambda _: _pending.pop(record.id, None))


async def job_ended(
    settings: J2CSettings, store: ObjectStore, record: JobRecord, log: Log
) -> UsageRecord:
    """Count the ended job in the metrics and write its end record (over the start record);
    returns the record."""
    usage = end_record(record, __version__)
    try:
        metrics.job_finished(
            record,
            user_labels=settings.metrics.user_labels,
            stages=usage.stages,
            queue_wait_s=usage.queue_wait_s,
            gpu_seconds=usage.gpu_seconds,
            layer_bytes={
                "packed": usage.bytes_packed,
                "reused": usage.bytes_reused,
                "uploaded": usage.bytes_uploaded,
            },
        )
    except Exception:  # metrics must not fail the job either
        log.exception("j2c: metrics of job %s not counted", record.id)
    if settings.usage.enabled:
        start = _pending.get(record.id)
        if start is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(start)
        await write_record(store, usage, log)
    return usage
