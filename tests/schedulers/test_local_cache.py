"""The node layer cache through the local backend: the data dir's cache by default, one folder
per uid and user; the second job of a project starts from it."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import stat
from pathlib import Path

from j2c_server.config import load_settings
from j2c_server.schedulers.unpack_cache import tenant_name
from j2c_server.wire.api import JobRequest, JobStatus

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "digits"
HITS = re.compile(r"(\d+) of (\d+) layers from the cache, (\d+) built")


async def _run_twice(tmp_path: Path, **local: object) -> list[list[str]]:
    from j2c_server.jobs.service import JobService

    project = tmp_path / "digits"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns(".venv", "outputs"))
    settings = load_settings(
        environ={},
        overrides={
            "data_dir": str(tmp_path / "data"),
            "storage": {"url": (tmp_path / "data" / "store").as_uri()},
            "scheduler": {"local": local},
        },
    )
    service = JobService(settings)
    service.start()
    runs = []
    try:
        for samples in ("200", "201"):
            record = await service.submit(
                JobRequest(
                    code_path=str(project),
                    call_path=str(project / "train.py"),
                    args=["--epochs", "1", "--samples", samples],
                    scheduler="local",
                )
            )
            async with asyncio.timeout(120):
                final = await service.wait(record.id)
            lines = [e.text or "" for e in await service.events(record.id) if e.kind.value == "log"]
            assert final.status == JobStatus.succeeded, (final.message, lines[-5:])
            runs.append(lines)
    finally:
        await service.stop()
    return runs


def _hits(lines: list[str]) -> list[tuple[int, ...]]:
    return [tuple(int(g) for g in m.groups()) for line in lines if (m := HITS.search(line))]


async def test_the_second_local_job_starts_from_the_data_dirs_cache(tmp_path: Path) -> None:
    cold, warm = await _run_twice(tmp_path)
    ((hits, total, built),) = _hits(cold)
    assert hits == 0 and built == total >= 1
    assert _hits(warm) == [(total, total, 0)]
    folder = tmp_path / "data" / "unpack-cache" / str(os.geteuid()) / tenant_name()
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700


async def test_the_cache_can_be_turned_off(tmp_path: Path) -> None:
    runs = await _run_twice(tmp_path, cache=False)
    assert [_hits(lines) for lines in runs] == [[], []]
    assert not (tmp_path / "data" / "unpack-cache").exists()
