"""Where packing runs: in niced worker processes under a server or a kernel (their event loop
comes first), in threads of the command's own process under the CLI (its user waits for the
pack: a process meant another interpreter's start-up, and niced it starved behind other work on
a loaded machine). Both answer the same requests with the same results."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import psutil
import pytest

from j2c_server.config import J2CSettings
from j2c_server.core.errors import J2CError
from j2c_server.jobs.pack_worker import NICENESS, PackWorkers
from j2c_server.jobs.service import JobService
from j2c_server.pack import PackSpec
from tests.support.jobs import settle


def _project(root: Path) -> PackSpec:
    root.mkdir()
    (root / "train.py").write_text("print(1)\n")
    (root / "data.txt").write_text("1 2 3\n")
    settle(root)
    return PackSpec(code_path=root, call_path="train.py")


async def _scan_and_pack(workers: PackWorkers, spec: PackSpec, cache: Path) -> dict[str, object]:
    """Scan, pack from the scan, and say which processes did it."""
    before = {child.pid for child in psutil.Process().children()}
    try:
        scan = await workers.scan(spec, cache)
        events: list[object] = []
        result, _ = await workers.pack(spec, cache, events.append, scan=scan)
        children = [c for c in psutil.Process().children() if c.pid not in before]
        mine = os.getpriority(os.PRIO_PROCESS, 0)
        return {
            "files": scan.report.plan.layers[0].files,
            "digest": result.layers[0].layer.digest,
            "progress": bool(events),
            "niceness": [os.getpriority(os.PRIO_PROCESS, c.pid) - mine for c in children],
        }
    finally:
        await workers.close()


def test_in_process_workers_pack_as_the_processes_do(tmp_path: Path) -> None:
    if os.getpriority(os.PRIO_PROCESS, 0) + NICENESS > 19:
        pytest.skip("this process is already niced to the limit")
    spec = _project(tmp_path / "proj")
    process = asyncio.run(_scan_and_pack(PackWorkers(1), spec, tmp_path / "c1"))
    thread = asyncio.run(_scan_and_pack(PackWorkers(1, in_process=True), spec, tmp_path / "c2"))
    assert process["niceness"] == [NICENESS]  # one niced child did it
    assert thread["niceness"] == []  # no child at all
    assert (thread["files"], thread["digest"]) == (process["files"], process["digest"])
    assert thread["progress"] and process["progress"]


def test_an_in_process_worker_reports_a_packing_error_as_the_process_does(tmp_path: Path) -> None:
    spec = PackSpec(code_path=tmp_path / "missing", call_path="train.py")
    messages = []
    for in_process in (False, True):
        workers = PackWorkers(1, in_process=in_process)

        async def scan(workers: PackWorkers = workers) -> None:
            try:
                await workers.scan(spec, tmp_path / "cache")
            finally:
                await workers.close()

        with pytest.raises(J2CError) as caught:
            asyncio.run(scan())
        messages.append((type(caught.value), str(caught.value)))
    assert messages[0] == messages[1]


@pytest.mark.parametrize(
    ("frontend", "in_process"), [("rest", False), ("magic", False), ("cli", True)]
)
def test_only_the_cli_packs_in_its_own_process(
    tmp_path: Path, frontend: str, in_process: bool
) -> None:
    settings = J2CSettings.model_validate({"data_dir": str(tmp_path / "data")})
    spec = _project(tmp_path / "proj")

    async def check() -> dict[str, object]:
        service = JobService(settings, frontend=frontend)
        try:
            return await _scan_and_pack(service.clients.packers, spec, tmp_path / "cache")
        finally:
            await service.stop()

    assert (asyncio.run(check())["niceness"] == []) is in_process
