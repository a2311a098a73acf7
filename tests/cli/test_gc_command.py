"""``j2c gc`` as a real subprocess over a real registry and the embedded ``file://`` store."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from j2c_server.registry.job_registry import REGISTRY_FILE, Registry
from j2c_server.storage import open_store
from j2c_server.wire.api import EventKind, JobRecord, JobRequest, JobStatus
from tests.storage.test_gc import Sent, send

J2C = [sys.executable, "-c", "from j2c_server.cli import main; main()"]


def j2c(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "J2C_DATA_DIR": str(data)}
    env.pop("J2C_CONFIG", None)
    return subprocess.run(
        [*J2C, *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def add_job(data: Path, job_id: str, status: JobStatus, manifest_uri: str | None) -> None:
    now = time.time()
    record = JobRecord(
        id=job_id,
        name="train.py",
        key=job_id,
        status=status,
        request=JobRequest(code_path="/p", call_path="/p/train.py"),
        scheduler="local",
        created_at=now,
        updated_at=now,
        manifest_uri=manifest_uri,
    )

    async def create() -> None:
        registry = Registry(data / REGISTRY_FILE)
        try:
            await registry.jobs.create_or_attach(
                record, {"kind": EventKind.status, "status": status}
            )
        finally:
            registry.close()

    asyncio.run(create())


@pytest.fixture
def data(tmp_path: Path) -> Path:
    folder = tmp_path / "data"
    folder.mkdir()
    return folder


def stored(data: Path) -> set[str]:
    root = data / "store"
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def sends(data: Path) -> tuple[Sent, Sent]:
    async def both() -> tuple[Sent, Sent]:
        store = open_store((data / "store").resolve().as_uri())
        return await send(store, "kept"), await send(store, "forgotten")

    return asyncio.run(both())


def test_gc_dry_run_prints_what_it_would_free_then_gc_removes_it(data: Path) -> None:
    kept, forgotten = sends(data)
    add_job(data, "job-running", JobStatus.running, kept.uri)
    before = stored(data)
    dry = j2c(data, "gc", "--dry-run", "--older-than", "0s")
    assert dry.returncode == 0, dry.stderr
    assert f"would remove {forgotten.manifest} (manifest" in dry.stderr
    assert "would free" in dry.stdout and "(3 objects)" in dry.stdout
    assert stored(data) == before
    done = j2c(data, "gc", "--older-than", "0s")
    assert done.returncode == 0, done.stderr
    assert "freed" in done.stdout and "kept 1 manifest and 3 blobs" in done.stdout
    assert stored(data) == before - {forgotten.manifest, forgotten.blobs[0], forgotten.blobs[2]}


def test_gc_keeps_recent_objects_by_default(data: Path) -> None:
    sends(data)
    before = stored(data)
    done = j2c(data, "gc")  # 30 days: everything here is seconds old
    assert done.returncode == 0, done.stderr
    assert "freed 0 B (0 objects)" in done.stdout
    assert stored(data) == before


def test_gc_refuses_while_a_job_is_being_sent(data: Path) -> None:
    sends(data)
    add_job(data, "job-sending", JobStatus.uploading, None)
    before = stored(data)
    done = j2c(data, "gc", "--older-than", "0s")
    assert done.returncode == 2, done.stderr
    assert "job job-sending is still being sent" in done.stderr
    assert stored(data) == before


def test_gc_names_a_bad_age(data: Path) -> None:
    done = j2c(data, "gc", "--older-than", "soon")
    assert done.returncode == 2 and "--older-than" in done.stderr and "not an age" in done.stderr
