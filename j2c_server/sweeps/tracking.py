"""A sweep's MLflow runs: one parent run for the sweep, one child run per variant, all created
before anything is submitted (as :func:`~j2c_server.jobs.tracking.start_run` does for one job).

- :func:`start_sweep_runs`: in the sweep's experiment, the parent run (tags ``j2c.sweep_id``,
  ``j2c.job_id``, ``j2c.sweep_size``; the grid as params: each swept name with its values), then
  one run per variant tagged ``mlflow.parentRunId`` (so MLflow's UI nests it), ``j2c.sweep_id``,
  ``j2c.variant_index``, ``j2c.job_id`` and ``j2c.param.<name>``, with the variant's values as
  its params. Each run is recorded in that job's ``results.tracking`` (the parent's and every
  child's), so the per-job :func:`~j2c_server.jobs.tracking.finish_run` closes and reads each
  child run when that child ends, and a per-job ``start_run`` reuses it instead of making another.
  The answer is the environment each variant adds to its row of the variant table
  (``MLFLOW_RUN_ID`` differs per row, which one shared command line cannot carry).
- :func:`finish_sweep_run`: the parent run closed with the sweep's aggregate status.
- :func:`metric_history`: one run's values of one metric by step, for the sweep view's plot.

Tracking that is off, not http(s), down or refusing never stops a sweep: it runs without the
variables, with a warning line in the parent's log.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from j2c_server.config import J2CSettings
from j2c_server.core.errors import NotFound
from j2c_server.jobs.children import Family
from j2c_server.jobs.journal import Journal
from j2c_server.jobs.tracking import (
    TRACKING_PHASE,
    MlflowClient,
    TrackingFailure,
    _public_uri,
    _warn,
    experiment_name,
    finish_run,
    project_name,
    run_url,
    tracking_uri,
)
from j2c_server.wire.api import (
    EventKind,
    JobRecord,
    JobResults,
    JobStatus,
    LineLevel,
    LineOrigin,
    TrackingRun,
)
from j2c_server.wire.manifest import Manifest, Variant

# MLflow's own limits (REST API docs): a param value of at most 6000 characters, at most 100
# params per log-batch call.
MAX_PARAM_CHARS = 6000
MAX_BATCH_PARAMS = 100
# Variants' runs are made a few at a time: a 64-variant sweep waits on ~8 round trips, not 64,
# and the tracking server is not flooded.
CONCURRENT_CALLS = 8

T = TypeVar("T")


@dataclass(frozen=True)
class VariantRun:
    """One variant to give a run: its child job, that job's journal, and its values."""

    journal: Journal
    record: JobRecord
    index: int
    params: Mapping[str, str]


def _clip(value: str) -> str:
    return value if len(value) <= MAX_PARAM_CHARS else value[: MAX_PARAM_CHARS - 1] + "…"


def grid_params(variants: Sequence[VariantRun]) -> dict[str, str]:
    """The parent run's params: each swept name with its distinct values in grid order."""
    values: dict[str, list[str]] = {}
    for variant in variants:
        for name, value in variant.params.items():
            seen = values.setdefault(name, [])
            if value not in seen:
                seen.append(value)
    return {name: _clip(",".join(found)) for name, found in values.items()}


async def _log_params(client: MlflowClient, run_id: str, params: Mapping[str, str]) -> None:
    items = [{"key": key, "value": _clip(value)} for key, value in params.items()]
    for start in range(0, len(items), MAX_BATCH_PARAMS):
        await client.call(
            "POST",
            "/runs/log-batch",
            json={"run_id": run_id, "params": items[start : start + MAX_BATCH_PARAMS]},
        )


def _tracking(uri: str, experiment: str, info: Mapping[str, Any]) -> TrackingRun:
    run_id = str(info["run_id"])
    return TrackingRun(
        run_id=run_id,
        experiment_id=experiment,
        url=run_url(uri, experiment, run_id),
        status=str(info.get("status") or "RUNNING"),
        artifact_uri=info.get("artifact_uri"),
    )


async def _record(journal: Journal, tracking: TrackingRun, text: str, seconds: float) -> None:
    def apply(job: JobRecord) -> None:
        job.results = (job.results or JobResults()).model_copy(update={"tracking": tracking})

    await journal.write(
        [
            {
                "kind": EventKind.log,
                "origin": LineOrigin.j2c,
                "level": LineLevel.info,
                "phase": TRACKING_PHASE,
                "text": text,
                "data": {"tracking": tracking.model_dump(mode="json"), "seconds": seconds},
            }
        ],
        change=apply,
    )


async def _bounded(calls: Sequence[Callable[[], Awaitable[T]]]) -> list[T]:
    gate = asyncio.Semaphore(CONCURRENT_CALLS)

    async def one(call: Callable[[], Awaitable[T]]) -> T:
        async with gate:
            return await call()

    return list(await asyncio.gather(*(one(call) for call in calls)))


def _base_tags(parent: JobRecord, manifest: Manifest | None) -> dict[str, str]:
    tags = {
        "j2c.sweep_id": parent.id,
        "j2c.project": project_name(parent),
        "j2c.scheduler": parent.scheduler,
    }
    if manifest is not None:
        tags["j2c.manifest_digest"] = manifest.digest()
    return tags


async def start_sweep_runs(
    settings: J2CSettings,
    parent_journal: Journal,
    parent: JobRecord,
    variants: Sequence[VariantRun],
    manifest: Manifest | None = None,
) -> list[dict[str, str]]:
    """Make the parent run and one child run per variant; answer each variant's environment
    (in ``variants``' order): empty dicts when tracking is off or fails (then with a warning)."""
    empty: list[dict[str, str]] = [{} for _ in variants]
    uri = await tracking_uri(settings, parent_journal)
    if uri is None:
        return empty
    started = time.monotonic()
    client = MlflowClient(uri, settings.mlflow)
    base = _base_tags(parent, manifest)
    try:
        experiment = await client.experiment_id(experiment_name(settings, parent))
        parent_info = await client.create_run(
            experiment,
            parent.name,
            {
                **base,
                "j2c.job_id": parent.id,
                "j2c.sweep_size": str(len(variants)),
                "mlflow.runName": parent.name,
            },
        )
        parent_run = _tracking(uri, experiment, parent_info)
        await _log_params(client, parent_run.run_id, grid_params(variants))

        async def child(variant: VariantRun) -> TrackingRun:
            tags = {
                **base,
                "mlflow.parentRunId": parent_run.run_id,
                "j2c.job_id": variant.record.id,
                "j2c.variant_index": str(variant.index),
                "mlflow.runName": variant.record.name,
                **{f"j2c.param.{name}": _clip(value) for name, value in variant.params.items()},
            }
            info = await client.create_run(experiment, variant.record.name, tags)
            run = _tracking(uri, experiment, info)
            await _log_params(client, run.run_id, variant.params)
            return run

        runs = await _bounded([functools.partial(child, variant) for variant in variants])
    except (TrackingFailure, KeyError, TypeError) as exc:
        await _warn(parent_journal, str(exc), time.monotonic() - started)
        return empty
    finally:
        await client.close()
    seconds = round(time.monotonic() - started, 3)
    await _record(
        parent_journal,
        parent_run,
        f"MLflow parent run {parent_run.run_id} ({len(runs)} child runs): {parent_run.url}",
        seconds,
    )
    public = _public_uri(uri)
    envs: list[dict[str, str]] = []
    for variant, run in zip(variants, runs, strict=True):
        await _record(variant.journal, run, f"MLflow run {run.run_id}: {run.url}", seconds)
        envs.append(
            {
                "MLFLOW_TRACKING_URI": public,
                "MLFLOW_EXPERIMENT_ID": experiment,
                "MLFLOW_RUN_ID": run.run_id,
                "MLFLOW_PARENT_RUN_ID": parent_run.run_id,
            }
        )
    return envs


async def track_variants(
    family: Family,
    parent: JobRecord,
    table: Sequence[Variant],
    manifest: Manifest | None = None,
) -> list[Variant]:
    """The sweep's variant table with each row's MLflow variables set over its env, once the
    parent run and one child run per row exist (recorded on each job); ``table`` as it was when
    tracking is off or fails. Call it before the table goes into the manifest. The children are
    ``parent.sweep.children`` by index; a row whose child record is missing gets no run."""
    settings = family.settings
    if not settings.mlflow.uri() or parent.sweep is None:
        return list(table)
    by_index: dict[int, JobRecord] = {}
    for child_id in parent.sweep.children:
        try:
            child = await family.get(child_id)
        except NotFound:
            continue
        if child.sweep is not None and child.sweep.index is not None:
            by_index[child.sweep.index] = child
    rows = [row for row in table if row.index in by_index]
    runs = [
        VariantRun(
            family.journal(by_index[row.index].id),
            by_index[row.index],
            row.index,
            row.params,
        )
        for row in rows
    ]
    envs = await start_sweep_runs(settings, family.journal(parent.id), parent, runs, manifest)
    extra = {row.index: env for row, env in zip(rows, envs, strict=True)}
    return [
        row.model_copy(update={"env": {**row.env, **extra.get(row.index, {})}}) for row in table
    ]


async def finish_sweep_run(
    settings: J2CSettings, parent: JobRecord, final: JobStatus
) -> JobResults:
    """The parent's results with its run closed by the sweep's aggregate status and read back
    (the rule of a job's own run: ``tracking.finish_run``)."""
    return await finish_run(settings, parent, parent.results or JobResults(), final)


async def metric_history(
    settings: J2CSettings, runs: Mapping[str, str], keys: Sequence[str]
) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """For each job id → run id in ``runs``, each metric in ``keys`` by step (sorted; the last
    value of a step wins). A run or metric that cannot be read is left out (best effort)."""
    uri = settings.mlflow.uri()
    if not uri or not runs or not keys:
        return {}
    client = MlflowClient(uri, settings.mlflow)

    async def one(job_id: str, run_id: str, key: str) -> tuple[str, str, list[tuple[int, float]]]:
        try:
            body = await client.call(
                "GET", "/metrics/get-history", params={"run_id": run_id, "metric_key": key}
            )
        except TrackingFailure:
            return job_id, key, []
        by_step: dict[int, float] = {}
        for item in body.get("metrics") or []:
            try:
                by_step[int(item.get("step") or 0)] = float(item["value"])
            except (KeyError, TypeError, ValueError):
                continue
        return job_id, key, sorted(by_step.items())

    try:
        found = await _bounded(
            [
                functools.partial(one, job_id, run_id, key)
                for job_id, run_id in runs.items()
                for key in keys
            ]
        )
    finally:
        await client.close()
    history: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for job_id, key, points in found:
        if points:
            history.setdefault(job_id, {})[key] = points
    return history
