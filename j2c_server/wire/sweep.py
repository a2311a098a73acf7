"""A sweep's wire shapes: the request's grid or list (:class:`SweepSpec`) and what a job record
says about its sweep (:class:`SweepInfo`, on the parent and on every child).

A sweep is one send of a base :class:`~j2c_server.wire.api.JobRequest` whose ``args`` (and the
sweep's ``env`` templates) name swept parameters as ``{name}``; ``{{`` and ``}}`` are a literal
brace. The variants are the cross product of ``grid`` (in its key order, the last key varying
fastest) or the explicit ``variants`` list, never both. Expansion and its errors live in
``sweeps/grid.py``; the variant table the job reads is ``wire.manifest.Variant``.

Only pydantic and ``wire.manifest`` (for ``Strict`` and the retries' cap) are imported:
``wire.api`` imports this.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field

from j2c_server.wire.manifest import MAX_VARIANT_RETRIES, Strict

PARAM_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _check_name(value: str) -> str:
    if not PARAM_NAME_RE.match(value):
        raise ValueError(
            f"{value!r} is not a parameter name (letters, digits and '_', not starting "
            "with a digit)"
        )
    return value


ParamName = Annotated[str, AfterValidator(_check_name)]


class SweepVariantSpec(Strict):
    """One variant of an explicit list: its values, and env of its own (templates allowed)."""

    params: dict[ParamName, str] = Field(
        default_factory=dict, description="Each parameter's value, substituted for '{name}'."
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment of this variant only."
    )


class SweepSpec(Strict):
    """The parameter grid or list of a sweep (``JobRequest.sweep``)."""

    grid: dict[ParamName, list[str]] = Field(
        default_factory=dict,
        description="Each name with its values; the variants are the cross product, in key "
        "order, the last key varying fastest.",
    )
    variants: list[SweepVariantSpec] = Field(
        default_factory=list, description="An explicit list of variants (instead of a grid)."
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Environment templates for every variant, e.g. {'SEED': '{seed}'}.",
    )
    max_parallel: int | None = Field(
        None, ge=1, description="At most this many variants run at once; default: all."
    )
    retries: int = Field(
        0,
        ge=0,
        le=MAX_VARIANT_RETRIES,
        description="Re-runs of a variant whose entry point exits non-zero, in place, by "
        "j2c-unpack on every backend (a run stopped by a signal is not re-run).",
    )


class SweepInfo(Strict):
    """What a job record says about its sweep: a parent has ``children``; a child ``parent``."""

    sweep_id: str = Field(..., description="The sweep's id: its parent job's id.")
    parent: str | None = Field(None, description="On a child: the parent job's id.")
    index: int | None = Field(None, ge=0, description="On a child: its row in the variant table.")
    params: dict[str, str] = Field(
        default_factory=dict, description="On a child: each swept name with its value."
    )
    keys: list[str] = Field(
        default_factory=list, description="The swept names, in grid (or first-use) order."
    )
    children: list[str] = Field(
        default_factory=list, description="On the parent: the child job ids, in index order."
    )
    size: int = Field(0, ge=0, description="How many variants the sweep has.")
    max_parallel: int | None = Field(None, ge=1)
    counts: dict[str, int] = Field(
        default_factory=dict,
        description="On the parent: how many children are in each status (JobStatus values).",
    )
    summary: str | None = Field(
        None, description="On the parent: e.g. '3/6 succeeded, 1 running, 2 queued'."
    )
    array: bool = Field(
        False, description="The backend runs the sweep as one native array job (Slurm, k8s)."
    )
