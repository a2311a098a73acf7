"""A real job through the real server leaves a data dir only its user can read: every folder
0700, every file j2c wrote 0600, whatever the server's umask; a data dir made earlier with wider
modes is tightened when the server opens it."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from j2c_server.wire.api import JobStatus
from tests.support.jobs import final_status, follow, submit


@pytest.fixture(autouse=True, params=[0o022, 0o000], ids=["umask-022", "umask-000"])
def server_umask(request: pytest.FixtureRequest) -> Iterator[int]:
    """Set before the server starts (autouse fixtures come first): the server's own umask."""
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    # The job's j2c-unpack writes the store's job folders: it must run this checkout's code.
    local = {"pass_env": ["PYTHONPATH"]}
    return {**jp_server_config, "J2CApp": {"settings_overrides": {"scheduler": {"local": local}}}}


def _written_by_the_job(path: Path, data: Path) -> bool:
    # What a job writes in its run folder keeps the job's own umask; the folder around is 0700.
    parts = path.relative_to(data).parts
    return len(parts) > 3 and parts[0] == "runs" and parts[2] in ("outputs", "work")


def _a_cache_entry(path: Path, data: Path) -> bool:
    # The node cache's entries are read-only trees (no job may change one), inside the 0700
    # folder of their uid and user (unpack-cache/<uid>/<user>/entries/...).
    parts = path.relative_to(data).parts
    return len(parts) > 5 and parts[0] == "unpack-cache" and parts[3] == "entries"


async def test_a_job_leaves_only_private_folders_and_files(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path, j2c_data_dir: Path
) -> None:
    assert stat.S_IMODE(j2c_data_dir.stat().st_mode) == 0o700  # made 0755 by the fixture
    record = await submit(jp_fetch)
    assert final_status(await follow(jp_ws_fetch, record.id)) == JobStatus.succeeded

    folders: dict[str, int] = {}
    files: dict[str, int] = {}
    for here, dirs, names in os.walk(j2c_data_dir):
        for name in dirs:
            path = Path(here, name)
            if not _a_cache_entry(path, j2c_data_dir):
                folders[str(path.relative_to(j2c_data_dir))] = stat.S_IMODE(path.lstat().st_mode)
        for name in names:
            path = Path(here, name)
            if not _written_by_the_job(path, j2c_data_dir) and not _a_cache_entry(
                path, j2c_data_dir
            ):
                files[str(path.relative_to(j2c_data_dir))] = stat.S_IMODE(path.lstat().st_mode)
    # Everything the issue names is there: registry, cache, store (blobs linked), run records.
    assert "registry.sqlite3" in files and "registry.sqlite3-wal" in files
    assert any(name.startswith("layers/blobs/") for name in files)
    assert any(name.startswith("store/blobs/") for name in files)
    assert any(name.startswith("store/jobs/") for name in files)  # the job's uploaded outputs
    assert any(name.endswith("/spec.json") for name in files)
    assert {name: mode for name, mode in folders.items() if mode != 0o700} == {}
    assert {name: mode for name, mode in files.items() if mode != 0o600} == {}
    blobs = [j2c_data_dir / name for name in files if name.startswith("store/blobs/")]
    assert all(blob.stat().st_nlink == 2 for blob in blobs)  # hard-linked from the cache
