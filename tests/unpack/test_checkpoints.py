"""The checkpoint lane of the outputs sync: complete files only, the newest ``keep_last``
entries of a folder kept in the store and older ones dropped from it (said in the log), the
byte cap. A ``file://`` store; the folders as a training loop leaves them."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from j2c_server.unpack.checkpoints import CheckpointRules, choose, scan
from j2c_server.unpack.outputs import INDEX_NAME, Caps, OutputsSync, WorkingCopy
from tests.support.jobs import settle


def _rules(keep_last: int = 2, max_bytes: int = 10**9) -> CheckpointRules:
    return CheckpointRules(("checkpoints",), every_s=1, keep_last=keep_last, max_bytes=max_bytes)


def _write(code: Path, name: str, data: str, age_s: float) -> None:
    path = code / "checkpoints" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data)
    when = time.time() - age_s
    os.utime(path, (when, when))


def test_a_file_still_being_written_is_not_a_checkpoint_until_it_settles(tmp_path: Path) -> None:
    _write(tmp_path, "step_0001", "1", age_s=30)
    _write(tmp_path, "step_0002", "2", age_s=0)  # written just now: it may still grow
    seen: dict[str, tuple[int, int, int]] = {}
    first = {entry.name: entry.complete for entry in scan(tmp_path, _rules(), seen, final=False)}
    assert first == {"checkpoints/step_0001": True, "checkpoints/step_0002": False}
    # Unchanged at the next look: complete.
    again = {entry.name: entry.complete for entry in scan(tmp_path, _rules(), seen, final=False)}
    assert again["checkpoints/step_0002"] is True
    # At the job's end everything there counts.
    _write(tmp_path, "step_0003", "3", age_s=0)
    assert all(entry.complete for entry in scan(tmp_path, _rules(), {}, final=True))


def test_the_newest_keep_last_are_kept_then_the_cap_leaves_out_older_ones(tmp_path: Path) -> None:
    for step in range(1, 5):
        _write(tmp_path, f"step_{step:04d}", "x" * 10 * step, age_s=100 - step)
    entries = scan(tmp_path, _rules(keep_last=3, max_bytes=75), {}, final=False)
    choice = choose(entries, [], _rules(keep_last=3, max_bytes=75))
    assert choice.dropped == ["checkpoints/step_0001"]  # older than the newest 3
    # Newest first under the cap: 40 + 30 fit in 75, 20 more does not.
    assert [entry.name for entry in choice.kept] == [
        "checkpoints/step_0004",
        "checkpoints/step_0003",
    ]
    assert [item["name"] for item in choice.left_out] == ["checkpoints/step_0002"]
    assert "over resume.max_mb" in str(choice.left_out[0]["reason"])


def test_a_sync_drops_older_checkpoints_from_the_store_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = tmp_path / "working-copy"
    store = tmp_path / "store"
    (tmp_path / "out").mkdir()
    for step in (1, 2):
        _write(code, f"step_{step:04d}", str(step), age_s=100 - step)
    settle(code / "checkpoints", age_s=50)
    os.utime(code / "checkpoints" / "step_0002", (time.time() - 40, time.time() - 40))
    sync = OutputsSync(
        tmp_path / "out",
        store.as_uri(),
        Caps(1e3, 1e3),
        WorkingCopy(code, {}),
        checkpoints=_rules(keep_last=2),
    )
    sync.sync(final=False)
    assert sorted(p.name for p in (store / "checkpoints").iterdir()) == ["step_0001", "step_0002"]
    _write(code, "step_0003", "3", age_s=5)
    sync.sync(final=False)
    assert sorted(p.name for p in (store / "checkpoints").iterdir()) == ["step_0002", "step_0003"]
    assert (code / "checkpoints" / "step_0001").exists()  # never from the job's own disk
    err = capsys.readouterr().err
    assert "dropped 1 older checkpoint from the store (checkpoints/step_0001)" in err
    index = json.loads((store / INDEX_NAME).read_text())
    assert [c["entry"] for c in index["checkpoints"]] == [
        "checkpoints/step_0003",
        "checkpoints/step_0002",
    ]
