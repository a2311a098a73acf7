"""A sweep on the real local backend: one send → one upload, a parent with six children each
running its own args from the one manifest; aggregate, cancel, re-send, edit-after-send."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from j2c_server.config import load_settings
from j2c_server.core.errors import InvalidInput
from j2c_server.jobs.service import JobService
from j2c_server.sweeps.hook import job_service
from j2c_server.wire.api import JobRequest, JobStatus
from j2c_server.wire.sweep import SweepSpec
from tests.support.jobs import diary

SCRIPT = """
import pathlib, sys, time
print("variant args:", " ".join(sys.argv[1:]))
print("data:", pathlib.Path("data.txt").read_text().strip())
time.sleep(float(sys.argv[-1]) if sys.argv[-1].replace('.', '').isdigit() else 0)
"""


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "train.py").write_text(SCRIPT)
    (root / "data.txt").write_text("as sent\n")
    return root


def _sweep_request(project: Path, **sweep: object) -> JobRequest:
    return JobRequest(
        code_path=str(project),
        call_path="train.py",
        args=["--lr", "{lr}", "--seed", "{seed}", "0"],
        sweep=SweepSpec.model_validate(
            {"grid": {"lr": ["1e-3", "3e-4", "1e-4"], "seed": ["0", "1"]}, **sweep}
        ),
    )


async def _log(service: JobService, job_id: str) -> str:
    events = await service.events(job_id)
    return "\n".join(diary(events))


async def test_six_variants_from_one_upload(j2c_data_dir: Path, tmp_path: Path) -> None:
    project = _project(tmp_path)
    service = job_service(load_settings())
    try:
        parent = await service.submit(_sweep_request(project, max_parallel=2))
        assert parent.sweep is not None and len(parent.sweep.children) == 6
        final = await asyncio.wait_for(service.wait(parent.id), 300)
        children = [await service.get(c) for c in parent.sweep.children]
        for child in children:
            await asyncio.wait_for(service.wait(child.id), 120)
        children = [await service.get(c) for c in parent.sweep.children]
        assert final.status == JobStatus.succeeded, final.message
        assert final.sweep is not None and final.sweep.summary == "6/6 succeeded"
        # One upload: the parent's; no child scanned, packed or uploaded anything.
        assert "upload" in final.stages
        assert all("upload" not in c.stages and "pack" not in c.stages for c in children)
        expected = [(lr, s) for lr in ["1e-3", "3e-4", "1e-4"] for s in ["0", "1"]]
        for (lr, seed), child in zip(expected, children, strict=True):
            assert child.status == JobStatus.succeeded
            assert child.sweep is not None and child.sweep.params == {"lr": lr, "seed": seed}
            assert f"variant args: --lr {lr} --seed {seed} 0" in await _log(service, child.id)
        # An unchanged re-send attaches to the sweep.
        again = await service.submit(_sweep_request(project, max_parallel=2))
        assert again.id == parent.id and again.decision is not None and again.decision.attached
    finally:
        await service.stop()


async def test_an_edit_after_the_send_never_reaches_queued_variants(
    j2c_data_dir: Path, tmp_path: Path
) -> None:
    project = _project(tmp_path)
    service = job_service(load_settings())
    try:
        parent = await service.submit(_sweep_request(project, max_parallel=1))
        assert parent.sweep is not None
        # Wait until the one upload is done, then edit while variants are still queued.
        while "upload" not in (await service.get(parent.id)).stages:
            await asyncio.sleep(0.1)
        (project / "data.txt").write_text("edited in the lab\n")
        await asyncio.wait_for(service.wait(parent.id), 300)
        for child_id in parent.sweep.children:
            await asyncio.wait_for(service.wait(child_id), 120)
            log = await _log(service, child_id)
            assert "data: as sent" in log and "edited" not in log
    finally:
        await service.stop()


async def test_cancelling_the_parent_cancels_every_variant(
    j2c_data_dir: Path, tmp_path: Path
) -> None:
    project = _project(tmp_path)
    request = _sweep_request(project, max_parallel=2)
    request = request.model_copy(update={"args": ["--lr", "{lr}", "--seed", "{seed}", "60"]})
    service = job_service(load_settings())
    try:
        parent = await service.submit(request)
        assert parent.sweep is not None
        while (await service.get(parent.sweep.children[0])).status not in (
            JobStatus.running,
            JobStatus.submitted,
        ):
            await asyncio.sleep(0.1)
        await service.cancel(parent.id)
        for child_id in parent.sweep.children:
            child = await asyncio.wait_for(service.wait(child_id), 120)
            assert child.status == JobStatus.cancelled
        parent_final = await asyncio.wait_for(service.wait(parent.id), 60)
        assert parent_final.status == JobStatus.cancelled
    finally:
        await service.stop()


@pytest.mark.parametrize(
    ("sweep", "args", "words"),
    [
        ({"grid": {"lr": []}}, ["{lr}"], "'lr' has no values"),
        ({"grid": {"lr": ["1", "1"]}}, ["{lr}"], "lists a value twice"),
        ({"grid": {"lr": ["1"]}}, ["{lr}", "{seed}"], "no value for {seed}"),
        ({"grid": {"lr": ["1", "2"]}}, ["x"], "lr is swept but no argument"),
        ({}, ["x"], "no variants"),
        ({"grid": {"a": ["1"]}, "variants": [{"params": {"a": "1"}}]}, ["{a}"], "not both"),
        ({"grid": {"a": [str(i) for i in range(300)]}}, ["{a}"], "more than the limit of 256"),
        ({"grid": {"a": ["1"]}}, ["{a", "{a}"], "unbalanced brace"),
        ({"variants": [{"params": {"a": "1"}}, {"params": {"a": "1"}}]}, ["{a}"], "exactly like"),
    ],
)
async def test_bad_grids_are_refused_before_anything_is_sent(
    j2c_data_dir: Path, tmp_path: Path, sweep: dict[str, object], args: list[str], words: str
) -> None:
    project = _project(tmp_path)
    request = JobRequest(
        code_path=str(project),
        call_path="train.py",
        args=args,
        sweep=SweepSpec.model_validate(sweep),
    )
    service = job_service(load_settings())
    try:
        with pytest.raises(InvalidInput, match="sweep") as caught:
            await service.submit(request)
        assert words in caught.value.message
        assert await service.list_jobs() == []
    finally:
        await service.stop()


@pytest.mark.parametrize("cap", [4, 5])
async def test_the_cap_is_the_sweep_max_variants_setting_checked_before_the_scan(
    j2c_data_dir: Path, tmp_path: Path, cap: int
) -> None:
    # No project at all: a scan would fail on it, so the cap's error proves it came first.
    request = _sweep_request(tmp_path / "absent")
    settings = load_settings(environ={"J2C_SWEEP__MAX_VARIANTS": str(cap)})
    assert settings.sweep.max_variants == cap
    service = job_service(settings)
    try:
        with pytest.raises(InvalidInput) as caught:
            await service.submit(request)
        assert caught.value.field == "sweep"
        assert caught.value.message == (
            f"sweep: 6 variants is more than the limit of {cap} (setting sweep.max_variants)"
        )
        assert await service.list_jobs() == []
        raised = job_service(load_settings(environ={"J2C_SWEEP__MAX_VARIANTS": "6"}))
        try:  # at the cap: past the sweep's checks, the scan is what refuses the absent project
            with pytest.raises(InvalidInput) as scanned:
                await raised.submit(request)
            assert scanned.value.field != "sweep", scanned.value.message
        finally:
            await raised.stop()
    finally:
        await service.stop()


FLAKY = """
import pathlib, sys
runs = pathlib.Path("runs.txt")  # in the variant's working copy, kept between its runs
n = int(runs.read_text()) + 1 if runs.exists() else 1
runs.write_text(str(n))
print("run", n, sys.argv[1])
sys.exit({"once": 4 if n == 1 else 0, "always": 6, "never": 0}[sys.argv[1]])
"""


async def test_retries_re_run_a_failed_variant_in_place_up_to_the_count(
    j2c_data_dir: Path, tmp_path: Path
) -> None:
    project = _project(tmp_path)
    (project / "flaky.py").write_text(FLAKY)
    request = JobRequest(
        code_path=str(project),
        call_path="flaky.py",
        args=["{mode}"],
        sweep=SweepSpec(grid={"mode": ["once", "always", "never"]}, retries=1),
    )
    service = job_service(load_settings())
    try:
        parent = await service.submit(request)
        assert parent.sweep is not None
        await asyncio.wait_for(service.wait(parent.id), 300)
        once, always, never = [
            await asyncio.wait_for(service.wait(c), 120) for c in parent.sweep.children
        ]
        assert (once.status, once.exit_code) == (JobStatus.succeeded, 0), once.message
        log = await _log(service, once.id)
        assert "j2c: running: variant 0 exited 4; re-running (retry 1 of 1)" in log
        assert "run 2 once" in log
        assert (always.status, always.exit_code) == (JobStatus.failed, 6)
        log = await _log(service, always.id)
        assert "variant 1 exited 6; re-running (retry 1 of 1)" in log and "run 2 always" in log
        assert "run 3" not in log
        assert never.status == JobStatus.succeeded
        assert "re-running" not in await _log(service, never.id)
        assert (await service.get(parent.id)).status == JobStatus.failed
    finally:
        await service.stop()


async def test_retries_of_a_multi_node_sweep_are_refused(
    j2c_data_dir: Path, tmp_path: Path
) -> None:
    request = _sweep_request(_project(tmp_path), retries=1)
    request = request.model_copy(
        update={"resources": request.resources.model_copy(update={"nodes": 2})}
    )
    service = job_service(load_settings())
    try:
        with pytest.raises(InvalidInput) as caught:
            await service.submit(request)
        assert caught.value.field == "sweep"
        assert "the 2 nodes of a multi-node variant would not re-run together" in str(caught.value)
        assert await service.list_jobs() == []
    finally:
        await service.stop()


async def test_a_cancelled_variant_is_not_re_run(j2c_data_dir: Path, tmp_path: Path) -> None:
    request = _sweep_request(_project(tmp_path), retries=2)
    request = request.model_copy(update={"args": ["--lr", "{lr}", "--seed", "{seed}", "60"]})
    service = job_service(load_settings())
    try:
        parent = await service.submit(request)
        assert parent.sweep is not None
        first = parent.sweep.children[0]
        while "variant args:" not in await _log(service, first):  # its script is running
            await asyncio.sleep(0.1)
        await service.cancel(first)
        child = await asyncio.wait_for(service.wait(first), 120)
        assert child.status == JobStatus.cancelled
        log = await _log(service, first)
        assert log.count("variant args:") == 1 and "re-running" not in log
        assert "after a signal: not re-run" in log
        await service.cancel(parent.id)
        await asyncio.wait_for(service.wait(parent.id), 120)
    finally:
        await service.stop()
