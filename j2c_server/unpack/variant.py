"""A sweep's row: which variant this task runs (``--variant N`` or ``--variant-env VAR``, e.g.
``SLURM_ARRAY_TASK_ID`` or ``JOB_COMPLETION_INDEX``) and the manifest plan with that row's args
and env in place of the base ones. A sweep's manifest never runs without a valid row.

A row may ask for ``retries``: the entry point is run again in place while it exits non-zero
(``run.run_attempts``), the same on every backend.

An array task's command line and env are the same for every task, so the names that differ
per variant carry a ``{variant}`` placeholder that the picked row's index fills in: the job id
(``J2C_JOB_ID``, ``<sweep>-{variant}``) and ``--output-uri`` (each variant's outputs its own).
"""

from __future__ import annotations

import argparse
import dataclasses
import os

from j2c_server.core.manifest_plan import ManifestPlan, PlanError
from j2c_server.unpack.errors import ManifestInvalid
from j2c_server.unpack.log import say

VARIANT_INDEX_ENV = "J2C_VARIANT_INDEX"
PLACEHOLDER = "{variant}"
JOB_ID_ENV = "J2C_JOB_ID"


def fill_placeholders(options: argparse.Namespace, index: int) -> None:
    """Variant ``index``'s own job id and outputs address, where the array left a placeholder."""
    if isinstance(options.output_uri, str):
        options.output_uri = options.output_uri.replace(PLACEHOLDER, str(index))
    job_id = os.environ.get(JOB_ID_ENV)
    if job_id is not None and PLACEHOLDER in job_id:
        os.environ[JOB_ID_ENV] = job_id.replace(PLACEHOLDER, str(index))


def variant_index(number: int | None, env_name: str | None) -> int | None:
    """The index the command line names, read from ``env_name`` when it names a variable."""
    if number is not None or not env_name:
        return number
    raw = os.environ.get(env_name, "").strip()
    if not raw.isdigit():
        raise ManifestInvalid(
            f"--variant-env {env_name}: the variable holds {raw!r}, not a variant index",
            field="variants",
        )
    return int(raw)


def pick_variant(manifest: ManifestPlan, index: int | None) -> ManifestPlan:
    """``manifest`` as variant ``index`` runs it: its args, its env over the base env."""
    try:
        row = manifest.variant(index)
    except PlanError as exc:
        raise ManifestInvalid(str(exc), field="variants") from None
    if row is None:
        return manifest
    values = ", ".join(f"{k}={v}" for k, v in row.params.items())
    again = f" (up to {row.retries} re-runs while it exits non-zero)" if row.retries else ""
    say("variant", f"{row.index} of {len(manifest.variants or [])}: {values}{again}")
    env = {**manifest.env, **row.env, VARIANT_INDEX_ENV: str(row.index)}
    return dataclasses.replace(manifest, args=list(row.args), env=env)


def variant_retries(manifest: ManifestPlan, index: int | None) -> int:
    """How many times the row ``index`` (picked already) is re-run while it exits non-zero."""
    row = manifest.variant(index)
    return (row.retries or 0) if row is not None else 0
