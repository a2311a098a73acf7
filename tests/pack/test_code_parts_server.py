"""Through the real server (REST, local scheduler, ``file://`` store): a project of small modules
and a big file sends its code layer in parts; after a one-file edit only that file's part reaches
the store, the pack stage says so, and the job runs with every file."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from j2c_server.wire.api import JobStatus
from tests.support.jobs import final_status, follow, log_lines, settle, stage_events, submit
from tests.support.projects import SEEN_FILES_PY

MIB = 1024 * 1024
TRAIN_PY = SEEN_FILES_PY + "print(json.dumps(seen, sort_keys=True), flush=True)\n"


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    """Parts of 64 kB; the job's j2c-unpack is this checkout's (it reads format_version 3)."""
    overrides = {"pack": {"code_part_kb": 64}, "scheduler": {"local": {"pass_env": ["PYTHONPATH"]}}}
    return {**jp_server_config, "J2CApp": {"settings_overrides": overrides}}


@pytest.fixture
def served(jp_root_dir: Path) -> Path:
    """``<root>/proj``: ~400 kB of modules in packages, and a 2 MB data file."""
    root = jp_root_dir / "proj"
    for number in range(80):
        folder = root / "lib" / f"p{number % 4}"
        folder.mkdir(parents=True, exist_ok=True)
        body = "".join(f"def f_{number}_{i}(x):\n    return x + {i * number}\n" for i in range(120))
        (folder / f"m{number:02}.py").write_text(body)
    (root / "train.py").write_text(TRAIN_PY)
    (root / "data.bin").write_bytes(os.urandom(2 * MIB))
    settle(root)
    return root


def files_of(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file()
    }


def blobs(data_dir: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in (data_dir / "store").rglob("blobs/sha256/*")}


async def test_an_edit_uploads_only_its_part(
    jp_fetch: Any, jp_ws_fetch: Any, served: Path, j2c_data_dir: Path
) -> None:
    first = await submit(jp_fetch)
    events = await follow(jp_ws_fetch, first.id)
    assert final_status(events) == JobStatus.succeeded, "\n".join(str(e.text) for e in events)
    assert json.loads(log_lines(events)[-1]) == files_of(served)
    pack = stage_events(events, "finished")["pack"]
    parts = [layer for layer in pack.data["layers"] if layer["role"] == "code"]
    assert len(parts) >= 3 and [p["part"] for p in parts] == list(range(1, len(parts) + 1))
    before = blobs(j2c_data_dir)
    assert sum(name.endswith(".file") for name in before) == 1  # the data file

    edited = served / "lib" / "p2" / "m42.py"
    edited.write_text(edited.read_text() + "EDITED = True\n")
    when = time.time() - 60  # a user's edit, older than the packer's racy window
    os.utime(edited, (when, when))
    second = await submit(jp_fetch)
    events = await follow(jp_ws_fetch, second.id)
    assert final_status(events) == JobStatus.succeeded
    assert json.loads(log_lines(events)[-1]) == files_of(served)

    new = {name: size for name, size in blobs(j2c_data_dir).items() if name not in before}
    [(name, size)] = new.items()  # one part, nothing else
    assert name.endswith(".tar.zst") and size < 64 * 1024
    finished = stage_events(events, "finished")
    upload = finished["upload"]
    assert upload.data["bytes_uploaded"] == size + upload.data["manifest_bytes"]
    assert 0 < upload.data["manifest_bytes"] < 16 * 1024 and upload.data["uploaded"] == ["code"]
    assert upload.data["files_uploaded"] == []
    assert f"uploaded code layer (1 of {len(parts)} parts)" in (upload.text or "")
    text = finished["pack"].text or ""
    assert text.startswith(f"code layer: 1 of {len(parts)} parts packed (")
    assert f"{len(parts) - 1} reused (changed since job {first.id})" in text
    outcomes = [layer["outcome"] for layer in finished["pack"].data["layers"]]
    assert outcomes.count("packed") == 1 and outcomes.count("reused") == len(parts) - 1
    assert second.decision is not None
    assert second.decision.message == f"1 file changed since job {first.id}: sending a new job"
