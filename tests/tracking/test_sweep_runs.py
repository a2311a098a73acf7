"""A sweep's MLflow runs against a real MLflow tracking server (``mlflow server``, SQLite backend
store; ``tests/tracking/mlflow_server.py``): one parent run, one child run per variant nested
under it by ``mlflow.parentRunId``, the grid as params, each run recorded on its job before
anything is submitted, and the environment each variant row carries."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from j2c_server.config import J2CSettings, load_settings
from j2c_server.jobs.children import Family
from j2c_server.jobs.clients import Clients
from j2c_server.jobs.fanout import EventBus
from j2c_server.jobs.journal import Journal
from j2c_server.registry.job_registry import Registry
from j2c_server.sweeps.tracking import (
    VariantRun,
    finish_sweep_run,
    grid_params,
    metric_history,
    start_sweep_runs,
    track_variants,
)
from j2c_server.sweeps.view import VariantRef, build_view
from j2c_server.wire.api import EventKind, JobRecord, JobRequest, JobStatus
from j2c_server.wire.manifest import Variant
from j2c_server.wire.sweep import SweepInfo
from tests.tracking.mlflow_server import MlflowServer

GRID = [{"lr": lr, "seed": seed} for lr in ("1e-3", "3e-4", "1e-4") for seed in ("0", "1")]


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    registry = Registry(tmp_path / "registry.sqlite3")
    yield registry
    registry.close()


def _settings(uri: str) -> J2CSettings:
    return load_settings(
        environ={}, overrides={"mlflow": {"tracking_uri": uri, "experiment": "sweeps"}}
    )


async def _job(registry: Registry, job_id: str, name: str) -> JobRecord:
    now = time.time()
    record = JobRecord(
        id=job_id,
        name=name,
        key=f"k-{job_id}",
        status=JobStatus.uploading,
        request=JobRequest(code_path="/p/proj", call_path="/p/proj/train.py"),
        scheduler="local",
        created_at=now,
        updated_at=now,
    )
    await registry.jobs.create_or_attach(
        record, {"kind": EventKind.status, "status": record.status}
    )
    return record


async def _sweep(registry: Registry, bus: EventBus) -> tuple[Journal, JobRecord, list[VariantRun]]:
    parent = await _job(registry, "sweep-1", "train.py sweep")
    variants = []
    for index, params in enumerate(GRID):
        child = await _job(registry, f"sweep-1.{index}", f"train.py [{index}]")
        variants.append(VariantRun(Journal(registry, bus, child.id), child, index, params))
    return Journal(registry, bus, parent.id), parent, variants


def _tags(run: dict[str, object]) -> dict[str, str]:
    data = run["data"]
    assert isinstance(data, dict)
    return {tag["key"]: tag["value"] for tag in data.get("tags", [])}


def _params(run: dict[str, object]) -> dict[str, str]:
    data = run["data"]
    assert isinstance(data, dict)
    return {param["key"]: param["value"] for param in data.get("params", [])}


async def test_a_sweep_gets_a_parent_run_and_one_nested_child_run_per_variant(
    registry: Registry, mlflow_server: MlflowServer
) -> None:
    settings = _settings(mlflow_server.url)
    bus = EventBus()
    parent_journal, parent, variants = await _sweep(registry, bus)

    envs = await start_sweep_runs(settings, parent_journal, parent, variants)

    parent_record = await registry.jobs.get(parent.id)
    assert parent_record.results is not None and parent_record.results.tracking is not None
    parent_run_id = parent_record.results.tracking.run_id
    parent_run = mlflow_server.run(parent_run_id)
    assert _tags(parent_run)["j2c.sweep_id"] == "sweep-1"
    assert _tags(parent_run)["j2c.sweep_size"] == "6"
    assert "mlflow.parentRunId" not in _tags(parent_run)
    assert _params(parent_run) == {"lr": "1e-3,3e-4,1e-4", "seed": "0,1"}

    assert len(envs) == len(GRID)
    run_ids = set()
    for variant, env in zip(variants, envs, strict=True):
        child = await registry.jobs.get(variant.record.id)
        assert child.results is not None and child.results.tracking is not None
        tracking = child.results.tracking
        assert env == {
            "MLFLOW_TRACKING_URI": mlflow_server.url,
            "MLFLOW_EXPERIMENT_ID": tracking.experiment_id,
            "MLFLOW_RUN_ID": tracking.run_id,
            "MLFLOW_PARENT_RUN_ID": parent_run_id,
        }
        run = mlflow_server.run(tracking.run_id)
        tags = _tags(run)
        assert tags["mlflow.parentRunId"] == parent_run_id
        assert tags["j2c.sweep_id"] == "sweep-1"
        assert tags["j2c.job_id"] == variant.record.id
        assert tags["j2c.variant_index"] == str(variant.index)
        assert tags["j2c.param.lr"] == variant.params["lr"]
        assert _params(run) == dict(variant.params)
        assert run["info"]["status"] == "RUNNING"  # made before submit, open for the job
        run_ids.add(tracking.run_id)
    assert len(run_ids) == len(GRID)
    experiment = mlflow_server.get("experiments/get-by-name", experiment_name="sweeps")
    found = httpx.post(
        f"{mlflow_server.url}/api/2.0/mlflow/runs/search",
        json={
            "experiment_ids": [experiment["experiment"]["experiment_id"]],
            "filter": f"tags.mlflow.parentRunId = '{parent_run_id}'",
        },
        timeout=10,
    ).json()
    assert {run["info"]["run_id"] for run in found["runs"]} == run_ids

    # A child's metrics by step (what the sweep view plots), then the parent closed.
    first = await registry.jobs.get(variants[0].record.id)
    assert first.results is not None and first.results.tracking is not None
    first_run = first.results.tracking.run_id
    for step, value in ((1, 0.5), (0, 0.9), (2, 0.25)):
        httpx.post(
            f"{mlflow_server.url}/api/2.0/mlflow/runs/log-metric",
            json={
                "run_id": first_run,
                "key": "val_loss",
                "value": value,
                "timestamp": int(time.time() * 1000),
                "step": step,
            },
            timeout=10,
        ).raise_for_status()
    history = await metric_history(
        settings, {first.id: first_run, "sweep-1.1": envs[1]["MLFLOW_RUN_ID"]}, ["val_loss"]
    )
    assert history == {first.id: {"val_loss": [(0, 0.9), (1, 0.5), (2, 0.25)]}}

    results = await finish_sweep_run(settings, parent_record, JobStatus.failed)
    assert results.tracking is not None and results.tracking.status == "FAILED"
    assert mlflow_server.run(parent_run_id)["info"]["status"] == "FAILED"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_a_tracking_server_that_is_down_leaves_the_sweep_untracked_with_a_warning(
    registry: Registry,
) -> None:
    bus = EventBus()
    parent_journal, parent, variants = await _sweep(registry, bus)
    settings = _settings(f"http://127.0.0.1:{_closed_port()}")

    envs = await start_sweep_runs(settings, parent_journal, parent, variants)

    assert envs == [{} for _ in GRID]
    events, _ = await registry.events.read(parent.id, 0, 100)
    warnings = [e.text for e in events if e.kind == EventKind.log and e.level == "warning"]
    assert any(
        text.startswith("MLflow: ") and "cannot be reached" in text for text in warnings if text
    )
    for variant in variants:
        child = await registry.jobs.get(variant.record.id)
        assert child.results is None or child.results.tracking is None


def test_the_parents_params_are_each_swept_name_with_its_values_in_grid_order() -> None:
    bus_less = [VariantRun(None, None, i, params) for i, params in enumerate(GRID)]  # type: ignore[arg-type]
    assert grid_params(bus_less) == {"lr": "1e-3,3e-4,1e-4", "seed": "0,1"}
    long = [VariantRun(None, None, 0, {"args": "x" * 7000})]  # type: ignore[arg-type]
    assert len(grid_params(long)["args"]) == 6000


async def test_the_sweep_view_reads_each_variants_run_live_then_from_its_results(
    registry: Registry, mlflow_server: MlflowServer
) -> None:
    """The route's MLflow path on real runs: a running variant's metrics are read from the
    tracking server as it logs them, with their history by step; an ended one's come from its
    results (what finish_run stored), its history still from the server."""
    settings = _settings(mlflow_server.url)
    bus = EventBus()
    parent_journal, parent, variants = await _sweep(registry, bus)
    envs = await start_sweep_runs(settings, parent_journal, parent, variants[:2])
    running_run, ended_run = envs[0]["MLFLOW_RUN_ID"], envs[1]["MLFLOW_RUN_ID"]
    for run_id, values in ((running_run, (0.9, 0.6)), (ended_run, (0.8, 0.3, 0.2))):
        for step, value in enumerate(values):
            httpx.post(
                f"{mlflow_server.url}/api/2.0/mlflow/runs/log-metric",
                json={
                    "run_id": run_id,
                    "key": "val_loss",
                    "value": value,
                    "timestamp": int(time.time() * 1000),
                    "step": step,
                },
                timeout=10,
            ).raise_for_status()
    running = (await registry.jobs.get(variants[0].record.id)).model_copy(
        update={"status": JobStatus.running}
    )
    ended = await registry.jobs.get(variants[1].record.id)
    assert ended.results is not None and ended.results.tracking is not None
    ended = ended.model_copy(
        update={
            "status": JobStatus.succeeded,
            "results": ended.results.model_copy(
                update={
                    "tracking": ended.results.tracking.model_copy(
                        update={"metrics": {"val_loss": 0.2}, "status": "FINISHED"}
                    )
                }
            ),
        }
    )
    refs = [
        VariantRef(0, running.id, variants[0].params),
        VariantRef(1, ended.id, variants[1].params),
    ]
    view = await build_view(
        settings, parent, ["lr", "seed"], refs, {running.id: running, ended.id: ended}
    )
    live, done = view.variants
    assert live.metrics == {"val_loss": 0.6} and live.metrics_source == "mlflow"
    assert [(p.step, p.value) for p in live.history["val_loss"]] == [(0, 0.9), (1, 0.6)]
    assert done.metrics == {"val_loss": 0.2} and done.metrics_source == "mlflow"
    assert [p.value for p in done.history["val_loss"]] == [0.8, 0.3, 0.2]
    assert view.summary == "1/2 succeeded, 1 running"


async def test_the_variant_table_gets_each_rows_run_and_the_parent_its_own(
    registry: Registry, mlflow_server: MlflowServer
) -> None:
    """What the sweep's upload calls before the table goes into the manifest: each row's env
    gains its own MLFLOW_RUN_ID (over what the row already sets), the parent's record its run."""
    settings = _settings(mlflow_server.url)
    bus = EventBus()
    _, parent, variants = await _sweep(registry, bus)
    info = SweepInfo(
        sweep_id=parent.id, keys=["lr", "seed"], children=[v.record.id for v in variants]
    )
    for variant in variants:
        child_info = SweepInfo(
            sweep_id=parent.id, parent=parent.id, index=variant.index, params=dict(variant.params)
        )
        await Journal(registry, bus, variant.record.id).write(
            [], change=lambda job, i=child_info: setattr(job, "sweep", i)
        )
    parent = parent.model_copy(update={"sweep": info})
    table = [
        Variant(
            index=v.index,
            args=["--lr", v.params["lr"]],
            env={"SEED": v.params["seed"]},
            params=dict(v.params),
        )
        for v in variants
    ]
    tracked = await track_variants(
        Family(settings, registry, bus, Clients(settings), lambda _: None), parent, table
    )
    assert [row.index for row in tracked] == [row.index for row in table]
    for row, variant in zip(tracked, variants, strict=True):
        child = await registry.jobs.get(variant.record.id)
        assert child.results is not None and child.results.tracking is not None
        assert row.env["MLFLOW_RUN_ID"] == child.results.tracking.run_id
        assert row.env["SEED"] == variant.params["seed"]
        assert row.args == ["--lr", variant.params["lr"]]
    stored = await registry.jobs.get(parent.id)
    assert stored.results is not None and stored.results.tracking is not None
    assert {row.env["MLFLOW_PARENT_RUN_ID"] for row in tracked} == {stored.results.tracking.run_id}
    off = load_settings(environ={})
    untracked = await track_variants(
        Family(off, registry, bus, Clients(off), lambda _: None), parent, table
    )
    assert untracked == table
