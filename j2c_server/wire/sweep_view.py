"""The sweep view's wire shape: ``GET /j2c/api/jobs/{id}/sweep`` answers a :class:`SweepView`.

One row per variant, with what the Compute panel's sweep table and plot show: the child job
(status, duration, exit code), the variant's values, and its metrics (from its MLflow run, else
from its ``metrics.json`` output) with their history by step where the run logged one. The
TypeScript types are generated from here too (``schema_export``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from j2c_server.wire.api import JobRecord, JobStatus
from j2c_server.wire.manifest import Strict

MetricsSource = Literal["mlflow", "metrics.json"]


class MetricPoint(Strict):
    step: int
    value: float


class SweepVariant(Strict):
    index: int = Field(..., ge=0, description="The variant's row in the sweep's variant table.")
    params: dict[str, str] = Field(
        default_factory=dict, description="Each swept name with this variant's value."
    )
    job: JobRecord = Field(..., description="The variant's own job (status, times, exit code).")
    metrics: dict[str, float] = Field(
        default_factory=dict, description="Each metric's latest value."
    )
    metrics_source: MetricsSource | None = Field(
        None, description="Where the metrics come from; null: the variant has none (yet)."
    )
    history: dict[str, list[MetricPoint]] = Field(
        default_factory=dict,
        description="A metric's values by step, where more than one step was logged.",
    )


class SweepView(Strict):
    parent: JobRecord
    keys: list[str] = Field(default_factory=list, description="The swept names, in grid order.")
    counts: dict[JobStatus, int] = Field(
        default_factory=dict, description="How many variants are in each status."
    )
    summary: str = Field(..., description="E.g. '3/6 succeeded, 1 running, 2 queued'.")
    variants: list[SweepVariant] = Field(default_factory=list)
