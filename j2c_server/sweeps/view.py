"""What ``GET /j2c/api/jobs/{id}/sweep`` answers: the sweep's variants as the Compute panel's
sweep view shows them (:class:`~j2c_server.wire.sweep_view.SweepView`).

Each variant's metrics come from its MLflow run (a finished child's are in its results; a
running one's are read live from the tracking server) with their history by step, else from the
``metrics.json`` it wrote to its outputs: a JSON object whose numbers are metrics, and whose
lists (of numbers, or of ``{"step", "value"}``) are a metric's history, its last value the
latest. What an ended variant reports cannot change, so it is read once per process (a small
cache) — the view polls every few seconds while the sweep runs.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from j2c_server.config import J2CSettings
from j2c_server.core.errors import J2CError, NotFound
from j2c_server.jobs.artifacts import open_artifact
from j2c_server.jobs.tracking import MlflowClient, TrackingFailure
from j2c_server.sweeps.tracking import metric_history
from j2c_server.wire.api import JobRecord, JobStatus
from j2c_server.wire.sweep_view import MetricPoint, MetricsSource, SweepVariant, SweepView

if TYPE_CHECKING:
    from j2c_server.jobs.service import JobService

METRICS_FILE = "metrics.json"
MAX_METRICS_BYTES = 1024 * 1024
_CACHE_SIZE = 4096
# The order the summary names statuses in after "N/M succeeded".
_SUMMARY_ORDER = (
    JobStatus.failed,
    JobStatus.cancelled,
    JobStatus.lost,
    JobStatus.cancelling,
    JobStatus.running,
    JobStatus.submitted,
    JobStatus.queued,
    JobStatus.uploading,
    JobStatus.packing,
    JobStatus.pending,
)

History = dict[str, list[tuple[int, float]]]
# What names a record's step in a metrics.json history list.
_STEP_KEYS = ("step", "epoch")


@dataclass(frozen=True)
class VariantRef:
    """One row of the sweep: its index in the variant table, child job id and values."""

    index: int
    job_id: str
    params: Mapping[str, str]


@dataclass(frozen=True)
class Reported:
    metrics: dict[str, float]
    history: History
    source: MetricsSource | None


_NOTHING = Reported({}, {}, None)


class _Ended:
    """What ended variants reported, by job id (bounded, oldest dropped first)."""

    def __init__(self) -> None:
        self._items: OrderedDict[str, Reported] = OrderedDict()

    def get(self, job_id: str) -> Reported | None:
        found = self._items.get(job_id)
        if found is not None:
            self._items.move_to_end(job_id)
        return found

    def put(self, job_id: str, reported: Reported) -> None:
        self._items[job_id] = reported
        self._items.move_to_end(job_id)
        while len(self._items) > _CACHE_SIZE:
            self._items.popitem(last=False)


_ENDED = _Ended()


def summarize(statuses: Sequence[JobStatus]) -> str:
    """``3/6 succeeded, 1 running, 2 queued``: the succeeded share first, then each other
    status that some variant is in."""
    counts = Counter(statuses)
    parts = [f"{counts[JobStatus.succeeded]}/{len(statuses)} succeeded"]
    parts += [f"{counts[status]} {status.value}" for status in _SUMMARY_ORDER if counts[status]]
    return ", ".join(parts)


def parse_metrics_file(data: bytes) -> tuple[dict[str, float], History]:
    """A ``metrics.json``'s metrics and histories; anything that is not a number (or a list of
    them) is left out. Raises ValueError when it is not a JSON object."""
    loaded = json.loads(data)
    if not isinstance(loaded, dict):
        raise ValueError("metrics.json is not a JSON object")
    metrics: dict[str, float] = {}
    history: History = {}
    for name, value in loaded.items():
        if _number(value):
            metrics[str(name)] = float(value)
        elif isinstance(value, list):
            for metric, points in _series(str(name), value).items():
                if points:
                    history[metric] = points
                    metrics[metric] = points[-1][1]
    return metrics, history


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _step(item: dict[str, Any], position: int) -> int:
    for key in _STEP_KEYS:
        if _number(item.get(key)):
            return int(item[key])
    return position


def _series(name: str, items: list[Any]) -> dict[str, list[tuple[int, float]]]:
    """A list's histories: numbers are ``name`` by position; ``{"step", "value"}`` records are
    ``name`` by step; other records (``{"epoch": 1, "loss": …, "accuracy": …}``) give each
    numeric field its own history, by their step or epoch."""
    found: dict[str, dict[int, float]] = {}
    for position, item in enumerate(items):
        if _number(item):
            found.setdefault(name, {})[position] = float(item)
        elif isinstance(item, dict):
            step = _step(item, position)
            if "value" in item:
                if _number(item["value"]):
                    found.setdefault(name, {})[step] = float(item["value"])
                continue
            for key, value in item.items():
                if key not in _STEP_KEYS and _number(value):
                    found.setdefault(str(key), {})[step] = float(value)
    return {metric: sorted(points.items()) for metric, points in found.items()}


async def _metrics_file(settings: J2CSettings, record: JobRecord) -> Reported:
    artifacts = record.results.artifacts if record.results is not None else []
    names = [a.name for a in artifacts if a.name.rsplit("/", 1)[-1] == METRICS_FILE]
    if not names:
        return _NOTHING
    name = METRICS_FILE if METRICS_FILE in names else names[0]
    try:
        async with open_artifact(record, name, settings.storage) as artifact:
            if artifact.size > MAX_METRICS_BYTES:
                return _NOTHING
            data = await asyncio.to_thread(artifact.path.read_bytes)
        metrics, history = parse_metrics_file(data)
    except (J2CError, OSError, ValueError):
        return _NOTHING  # unreadable or not metrics: the row shows none
    return Reported(metrics, history, "metrics.json")


async def _live_metrics(settings: J2CSettings, run_id: str) -> dict[str, float]:
    uri = settings.mlflow.uri()
    if not uri:
        return {}
    client = MlflowClient(uri, settings.mlflow)
    try:
        run = await client.get_run(run_id)
        return {
            str(item["key"]): float(item["value"])
            for item in (run.get("data") or {}).get("metrics") or []
        }
    except (TrackingFailure, KeyError, TypeError, ValueError):
        return {}
    finally:
        await client.close()


async def _reported(settings: J2CSettings, record: JobRecord) -> Reported:
    ended = record.status.terminal
    if ended:
        cached = _ENDED.get(record.id)
        if cached is not None:
            return cached
    tracking = record.results.tracking if record.results is not None else None
    found = _NOTHING
    if tracking is not None:
        metrics = tracking.metrics if ended else await _live_metrics(settings, tracking.run_id)
        if metrics:
            history = await metric_history(settings, {record.id: tracking.run_id}, list(metrics))
            found = Reported(dict(metrics), history.get(record.id, {}), "mlflow")
    if found.source is None and ended:
        found = await _metrics_file(settings, record)
    if ended and record.results is not None:  # outputs collected: final
        _ENDED.put(record.id, found)
    return found


async def build_view(
    settings: J2CSettings,
    parent: JobRecord,
    keys: Sequence[str],
    refs: Sequence[VariantRef],
    children: Mapping[str, JobRecord],
) -> SweepView:
    """The view of ``parent``'s variants ``refs`` (their jobs in ``children``, by id)."""
    present = [ref for ref in refs if ref.job_id in children]
    reports = await asyncio.gather(*(_reported(settings, children[ref.job_id]) for ref in present))
    variants = [
        SweepVariant(
            index=ref.index,
            params=dict(ref.params),
            job=children[ref.job_id],
            metrics=reported.metrics,
            metrics_source=reported.source,
            history={
                name: [MetricPoint(step=step, value=value) for step, value in points]
                for name, points in reported.history.items()
                if len(points) > 1
            },
        )
        for ref, reported in zip(present, reports, strict=True)
    ]
    statuses = [variant.job.status for variant in variants]
    return SweepView(
        parent=parent,
        keys=list(keys),
        counts=dict(Counter(statuses)),
        summary=summarize(statuses),
        variants=variants,
    )


def sweep_children(parent: JobRecord) -> tuple[list[str], list[str]] | None:
    """The swept names and the child job ids of ``parent`` (index order); None when it is no
    sweep's parent."""
    info = parent.sweep
    if info is None or info.parent is not None:
        return None
    return list(info.keys), list(info.children)


def variant_ref(child: JobRecord, position: int) -> VariantRef:
    """A child's row: its index and values as its record says (else its place in the list)."""
    info = child.sweep
    if info is None:
        return VariantRef(position, child.id, {})
    index = info.index if info.index is not None else position
    return VariantRef(index, child.id, dict(info.params))


async def sweep_view(service: JobService, parent_id: str) -> SweepView:
    """``GET /jobs/{id}/sweep``: the sweep whose parent job is ``parent_id``; a job that is no
    sweep's parent (a plain job, or one variant) is refused (404, naming it)."""
    parent = await service.get(parent_id)
    rows = sweep_children(parent)
    if rows is None:
        raise NotFound(f"job {parent_id} is not a sweep")
    keys, child_ids = rows
    children: dict[str, JobRecord] = {}
    refs: list[VariantRef] = []
    for position, child_id in enumerate(child_ids):
        try:
            child = await service.get(child_id)
        except NotFound:
            continue  # a removed variant: no row
        children[child_id] = child
        refs.append(variant_ref(child, position))
    return await build_view(service.settings, parent, keys, refs, children)
