"""Whether a test whose engine is missing may skip: on a developer's machine it may (saying
why); under CI (``CI=true``, which scripts/test.sh sets) it fails, so a CI run where podman,
Slurm, Ray, the lab Python's packages or a small tmpfs could not be had goes red instead of
green with those tests skipped."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def engine_missing(reason: str) -> NoReturn:
    """Skip with ``reason``; under CI, fail with it."""
    if under_ci():
        pytest.fail(f"{reason} (CI=true: a test that needs it fails instead of skipping)")
    pytest.skip(reason)
