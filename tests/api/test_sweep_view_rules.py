"""The sweep view's rules that need no server: the aggregate's words, what a ``metrics.json``
may hold, and a view built from finished variants whose metrics come from their outputs (a real
``file://`` outputs folder, as the local backend leaves it)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from j2c_server.config import load_settings
from j2c_server.sweeps.view import VariantRef, build_view, parse_metrics_file, summarize
from j2c_server.wire.api import Artifact, JobRecord, JobRequest, JobResults, JobStatus

S = JobStatus


def test_the_summary_reads_succeeded_of_all_then_each_other_status() -> None:
    statuses = [S.succeeded] * 3 + [S.running] + [S.queued] * 2
    assert summarize(statuses) == "3/6 succeeded, 1 running, 2 queued"
    assert summarize([S.failed, S.succeeded]) == "1/2 succeeded, 1 failed"
    assert summarize([]) == "0/0 succeeded"


def test_metrics_json_numbers_are_metrics_and_lists_are_their_history() -> None:
    metrics, history = parse_metrics_file(
        json.dumps(
            {
                "val_loss": 0.25,
                "epochs": 3,
                "ok": True,  # a flag, not a metric
                "name": "resnet",
                "acc": [0.5, 0.7, 0.75],
                "loss": [{"step": 10, "value": 0.9}, {"step": 20, "value": 0.4}],
            }
        ).encode()
    )
    assert metrics == {"val_loss": 0.25, "epochs": 3.0, "acc": 0.75, "loss": 0.4}
    assert history == {"acc": [(0, 0.5), (1, 0.7), (2, 0.75)], "loss": [(10, 0.9), (20, 0.4)]}


def test_a_history_of_records_gives_each_numeric_field_a_history_by_epoch() -> None:
    # What examples/digits/train.py writes.
    metrics, history = parse_metrics_file(
        json.dumps(
            {
                "history": [
                    {"epoch": 1, "loss": 2.0, "accuracy": 0.4},
                    {"epoch": 2, "loss": 1.5, "accuracy": 0.6, "note": "x"},
                ]
            }
        ).encode()
    )
    assert metrics == {"loss": 1.5, "accuracy": 0.6}
    assert history == {"loss": [(1, 2.0), (2, 1.5)], "accuracy": [(1, 0.4), (2, 0.6)]}


@pytest.mark.parametrize("text", ["[1, 2]", "3", '"x"', "{not json"])
def test_a_metrics_json_that_is_no_object_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_metrics_file(text.encode())


def _child(tmp_path: Path, index: int, status: JobStatus, metrics: object | None) -> JobRecord:
    now = time.time()
    outputs = tmp_path / f"out-{index}"
    outputs.mkdir()
    artifacts = []
    if metrics is not None:
        (outputs / "metrics.json").write_text(json.dumps(metrics))
        artifacts.append(Artifact(name="metrics.json"))
    return JobRecord(
        id=f"sw.{index}",
        name=f"train.py [{index}]",
        key=f"k{index}",
        status=status,
        request=JobRequest(code_path="/p", call_path="/p/train.py"),
        scheduler="local",
        created_at=now,
        updated_at=now,
        started_at=now - 5,
        finished_at=now,
        exit_code=0 if status == S.succeeded else 1,
        results=JobResults(artifacts=artifacts, output_uri=outputs.as_uri()),
    )


async def test_a_view_of_finished_variants_reads_each_ones_metrics_json(tmp_path: Path) -> None:
    settings = load_settings(environ={})
    parent = _child(tmp_path, 99, S.failed, None).model_copy(update={"id": "sw"})
    children = {
        c.id: c
        for c in [
            _child(tmp_path, 0, S.succeeded, {"val_loss": 0.5, "acc": [0.1, 0.2]}),
            _child(tmp_path, 1, S.succeeded, {"val_loss": 0.25}),
            _child(tmp_path, 2, S.failed, None),  # failed before writing any
        ]
    }
    refs = [
        VariantRef(0, "sw.0", {"lr": "1e-3"}),
        VariantRef(1, "sw.1", {"lr": "1e-4"}),
        VariantRef(2, "sw.2", {"lr": "1e-5"}),
        VariantRef(3, "sw.gone", {"lr": "1e-6"}),  # removed meanwhile: no row
    ]
    view = await build_view(settings, parent, ["lr"], refs, children)
    assert view.summary == "2/3 succeeded, 1 failed"
    assert view.counts == {S.succeeded: 2, S.failed: 1}
    assert [v.index for v in view.variants] == [0, 1, 2]
    first, second, third = view.variants
    assert first.metrics == {"val_loss": 0.5, "acc": 0.2}
    assert first.metrics_source == "metrics.json"
    assert [(p.step, p.value) for p in first.history["acc"]] == [(0, 0.1), (1, 0.2)]
    assert second.params == {"lr": "1e-4"} and second.history == {}
    assert third.metrics == {} and third.metrics_source is None
