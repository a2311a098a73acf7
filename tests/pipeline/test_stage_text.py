"""The stage words for the cases one real job cannot show at once (failed, first pack, resumed)."""

from __future__ import annotations

from j2c_server.jobs.stage_text import describe, pack_layer_text
from j2c_server.wire.api import Stage, StageState


def test_a_failed_stage_says_its_error() -> None:
    text = describe(Stage.upload, StageState.failed, {"error": "the store refused the key"})
    assert text == "the store refused the key"


def test_pack_layers_say_why_each_was_packed_or_reused() -> None:
    first = {"role": "code", "files": 3, "size": 2_000, "outcome": "packed", "changed_since": None}
    assert pack_layer_text(first) == (
        "code layer packed: 3 files, 2.0 kB (first pack of this project)"
    )
    edited = {**first, "changed_since": "j1"}
    assert pack_layer_text(edited).endswith("(changed since job j1)")
    same = {"role": "venv", "outcome": "same_content", "reused_from": "j0"}
    assert pack_layer_text(same) == "venv layer re-packed: same content as job j0"
    unknown = {"role": "venv", "outcome": "reused", "reused_from": None}
    assert pack_layer_text(unknown) == "venv layer reused: unchanged since an earlier pack"


def test_watch_started_again_says_why() -> None:
    data = {"scheduler_job_id": "4242", "resumed": True}
    assert describe(Stage.watch, StageState.started, data) == (
        "following 4242 again (the process that watched it stopped)"
    )
    assert describe(Stage.configure, StageState.finished, {"since": None}) == "job spec built"
