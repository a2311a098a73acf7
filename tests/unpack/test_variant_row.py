"""j2c-unpack's choice of a sweep's row: by --variant N or by an array task's index variable;
a sweep's manifest never runs without a valid row, and a plain one never takes an index."""

from __future__ import annotations

import argparse
import os

import pytest

from j2c_server.core.manifest_plan import ManifestPlan
from j2c_server.unpack.errors import ManifestInvalid
from j2c_server.unpack.variant import fill_placeholders, pick_variant, variant_index
from j2c_server.wire.manifest import EntryPoint, Manifest, Variant


def _plan(variants: list[Variant] | None) -> ManifestPlan:
    manifest = Manifest(
        created_by="test",
        created_at=0.0,
        layers=[],
        entry=EntryPoint(kind="script", target="train.py"),
        args=["--base"],
        env={"A": "base", "B": "kept"},
        variants=variants,
    )
    return ManifestPlan.from_dict(manifest.model_dump(mode="json"))


ROWS = [
    Variant(index=i, args=["--lr", lr], env={"A": lr}, params={"lr": lr})
    for i, lr in enumerate(["1e-3", "1e-4"])
]


def test_the_row_replaces_the_args_and_sets_its_env_over_the_base() -> None:
    plan = pick_variant(_plan(ROWS), 1)
    assert plan.args == ["--lr", "1e-4"]
    assert plan.env == {"A": "1e-4", "B": "kept", "J2C_VARIANT_INDEX": "1"}


def test_the_index_comes_from_the_named_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "1")
    assert variant_index(None, "SLURM_ARRAY_TASK_ID") == 1
    assert variant_index(0, "SLURM_ARRAY_TASK_ID") == 0  # --variant wins
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "x")
    with pytest.raises(ManifestInvalid, match="not a variant index"):
        variant_index(None, "JOB_COMPLETION_INDEX")


@pytest.mark.parametrize(
    ("variants", "index", "words"),
    [
        (ROWS, None, "holds a sweep of 2 variants"),
        (ROWS, 2, "variant 2 is not in the table"),
        (None, 0, "is no sweep's"),
    ],
)
def test_a_missing_or_wrong_row_is_refused(
    variants: list[Variant] | None, index: int | None, words: str
) -> None:
    with pytest.raises(ManifestInvalid, match=words):
        pick_variant(_plan(variants), index)


def test_a_plain_manifest_runs_as_before() -> None:
    plan = _plan(None)
    assert pick_variant(plan, None) is plan


def test_an_array_tasks_job_id_and_outputs_are_its_variants_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One command line for every task: ``{variant}`` becomes the picked row's index."""
    options = argparse.Namespace(output_uri="s3://b/jobs/ab12-{variant}/outputs")
    monkeypatch.setenv("J2C_JOB_ID", "ab12-{variant}")
    fill_placeholders(options, 4)
    assert options.output_uri == "s3://b/jobs/ab12-4/outputs"
    assert os.environ["J2C_JOB_ID"] == "ab12-4"
    plain = argparse.Namespace(output_uri=None)
    monkeypatch.setenv("J2C_JOB_ID", "cd34-2")
    fill_placeholders(plain, 7)  # a child submitted on its own already has its own names
    assert plain.output_uri is None and os.environ["J2C_JOB_ID"] == "cd34-2"
