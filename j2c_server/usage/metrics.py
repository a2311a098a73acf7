"""j2c's Prometheus metrics, on ``prometheus_client``'s default registry: the one
jupyter_server's ``/metrics`` already serves, so j2c adds no route of its own.

Jobs submitted and finished (by scheduler and status), GPU-seconds, stage durations and queue
waits (histograms), layer bytes packed / uploaded / reused, followers of event streams, and
usage records that could not be written. Labels name no user unless ``metrics.user_labels`` is
on (a hub's user count would multiply every series). Counts are this process's: jobs that a
detached watcher or a CLI drives to their end are counted in the usage records, not here.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from prometheus_client import REGISTRY, Counter, Gauge, Histogram

from j2c_server.wire.api import JobRecord

log = logging.getLogger("j2c")

# Stages take from milliseconds (a reused configure) to many minutes (a first pack, a run).
_STAGE_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 14400)
_WAIT_BUCKETS = (0.5, 1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400)


@dataclass(frozen=True)
class _Metrics:
    user_labels: bool
    submitted: Counter
    finished: Counter
    gpu_seconds: Counter
    stage_seconds: Histogram
    queue_wait: Histogram
    layer_bytes: Counter
    followers: Gauge
    usage_failures: Counter

    def collectors(self) -> list[Counter | Gauge | Histogram]:
        return [
            self.submitted,
            self.finished,
            self.gpu_seconds,
            self.stage_seconds,
            self.queue_wait,
            self.layer_bytes,
            self.followers,
            self.usage_failures,
        ]


def _make(user_labels: bool) -> _Metrics:
    user = ("user",) if user_labels else ()
    return _Metrics(
        user_labels=user_labels,
        submitted=Counter("j2c_jobs_submitted", "Jobs created by a send.", ("scheduler", *user)),
        finished=Counter(
            "j2c_jobs_finished", "Jobs that ended, by final status.", ("scheduler", "status", *user)
        ),
        gpu_seconds=Counter(
            "j2c_gpu_seconds", "GPUs asked x run time of ended jobs.", ("scheduler", *user)
        ),
        stage_seconds=Histogram(
            "j2c_stage_duration_seconds",
            "How long each pipeline stage of an ended job took.",
            ("stage",),
            buckets=_STAGE_BUCKETS,
        ),
        queue_wait=Histogram(
            "j2c_queue_wait_seconds",
            "From submitted to running, per ended job.",
            ("scheduler",),
            buckets=_WAIT_BUCKETS,
        ),
        layer_bytes=Counter(
            "j2c_layer_bytes",
            "Layer bytes of ended jobs: packed, reused from the layer cache, uploaded.",
            ("kind",),
        ),
        followers=Gauge("j2c_stream_followers", "Event streams being followed now."),
        usage_failures=Counter(
            "j2c_usage_record_failures", "Usage records that could not be written."
        ),
    )


_lock = threading.Lock()
_current: _Metrics | None = None


def metrics(user_labels: bool | None = None) -> _Metrics:
    """The process's metrics. The label set is fixed when they are made: asking with the other
    ``user_labels`` (another service's settings, in one process) makes them again; None takes
    them as they are."""
    global _current
    with _lock:
        if user_labels is None:
            user_labels = _current.user_labels if _current is not None else False
        if _current is not None and _current.user_labels != user_labels:
            for collector in _current.collectors():
                REGISTRY.unregister(collector)
            log.info("j2c: metrics made again with user labels %s", "on" if user_labels else "off")
            _current = None
        if _current is None:
            _current = _make(user_labels)
        return _current


def _users(m: _Metrics, record: JobRecord) -> tuple[str, ...]:
    return (record.user or "unknown",) if m.user_labels else ()


def job_submitted(record: JobRecord, *, user_labels: bool) -> None:
    m = metrics(user_labels)
    m.submitted.labels(record.scheduler, *_users(m, record)).inc()


def job_finished(
    record: JobRecord,
    *,
    user_labels: bool,
    stages: dict[str, float],
    queue_wait_s: float | None,
    gpu_seconds: float,
    layer_bytes: dict[str, int],
) -> None:
    m = metrics(user_labels)
    users = _users(m, record)
    m.finished.labels(record.scheduler, record.status.value, *users).inc()
    m.gpu_seconds.labels(record.scheduler, *users).inc(gpu_seconds)
    for stage, seconds in stages.items():
        m.stage_seconds.labels(stage).observe(seconds)
    if queue_wait_s is not None:
        m.queue_wait.labels(record.scheduler).observe(max(queue_wait_s, 0.0))
    for kind, count in layer_bytes.items():
        m.layer_bytes.labels(kind).inc(count)


def follower_joined() -> None:
    metrics().followers.inc()


def follower_left() -> None:
    metrics().followers.dec()


def usage_record_failed() -> None:
    metrics().usage_failures.inc()
