"""Whose a line is, decided once at ingest (the watch stage's ``log_draft``) from the job's tag,
never from how the line starts; stored and read back with its origin, level and phase."""

from __future__ import annotations

import json

import pytest

from j2c_server.core.j2c_lines import format_line, line_tag, parse_line
from j2c_server.jobs.drive.watch import log_draft
from j2c_server.registry.event_rows import make_events
from j2c_server.schedulers.base import LogLine
from j2c_server.wire.api import Event, LineLevel, LineOrigin
from j2c_server.wire.event_frames import diary_text

TAG = line_tag("20260101-000000-abcdef")


def _stored(line: LogLine) -> Event:
    """The line as the registry stores it and a follower reads it back."""
    _, texts = make_events("job", 0, [log_draft(line, TAG)])
    return Event.model_validate_json(texts[0])


def test_a_tagged_line_is_j2cs_with_its_level_and_phase_and_no_tag() -> None:
    text = format_line(TAG, "warning", "uploading outputs", "left out: ckpt.pt 3 GB")
    event = _stored(LogLine(text=text, cursor="1", stream="stderr"))
    assert (event.origin, event.level, event.phase) == (
        LineOrigin.j2c,
        LineLevel.warning,
        "uploading outputs",
    )
    assert event.text == "left out: ckpt.pt 3 GB" and event.stream == "stderr"
    assert event.is_j2c_line
    assert diary_text(json.loads(event.model_dump_json())) == (
        "j2c: uploading outputs: left out: ckpt.pt 3 GB"
    )


@pytest.mark.parametrize(
    "text",
    [
        "j2c: running: done",  # what j2c-unpack writes without a tag: a user can print it
        format_line(line_tag("20260101-000000-fedcba"), "info", "running", "x"),  # another job's
        f"j2c[{TAG}] fatal running: x",  # not a level
        f"j2c[{TAG}] info: x",  # no phase
        f" j2c[{TAG}] info running: x",  # not at the start
    ],
)
def test_anything_else_is_the_jobs_line_as_written(text: str) -> None:
    event = _stored(LogLine(text=text, cursor="1"))
    assert event.origin == LineOrigin.job and event.level is None and event.phase is None
    assert event.text == text and not event.is_j2c_line
    assert diary_text(json.loads(event.model_dump_json())) == text


def test_a_merged_log_says_no_stream_and_a_rank_is_kept() -> None:
    event = _stored(LogLine(text=format_line(TAG, "error", "running", "x"), cursor="1", rank=2))
    assert event.stream is None and event.data == {"rank": 2}
    assert "stream" not in event.model_dump(exclude_defaults=True)


def test_tags_are_per_job_and_a_sweeps_variants_share_their_sweeps() -> None:
    assert line_tag("a") != line_tag("b")
    assert line_tag("sweep-3", "sweep") == line_tag("sweep")
    assert parse_line(format_line(TAG, "info", "summary", '{"a": 1}'), TAG) is not None
