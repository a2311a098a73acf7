"""Log lines' JSON made without the model, and events read back from the registry unparsed:
the same objects the model's path gives, and a terminal event recognised without the model."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from j2c_server.registry.job_registry import Registry
from j2c_server.wire.api import (
    TERMINAL_STATUSES,
    Event,
    EventKind,
    JobRecord,
    JobRequest,
    JobStatus,
)
from j2c_server.wire.event_frames import WireEvent, log_line_json, wire_json

TEXTS = [
    "",
    "plain",
    'quotes " and \\ backslashes \\"',
    "tab\tcarriage\rbell\x07nul\x00esc\x1b[31mred\x1b[0m",
    "unicode é ü 中文 🚀 \u2028 \u2029",
    '{"kind":"status","status":"failed"}',
    "x" * 70_000,
]
SHAPES: list[dict[str, Any]] = [
    {"kind": EventKind.log, "stream": "stdout"},
    {"kind": "log", "stream": "stderr"},
    {"kind": EventKind.log},
    {"kind": EventKind.log, "stream": "stdout", "data": {}},
    {"kind": EventKind.log, "stream": "stdout", "data": {"rank": 0}},
    {"kind": EventKind.log, "stream": "stderr", "data": {"rank": 7}},
]


def _model_json(job_id: str, seq: int, now: float, draft: dict[str, Any]) -> str:
    return wire_json(Event.model_validate({**draft, "job_id": job_id, "seq": seq, "time": now}))


@pytest.mark.parametrize("shape", SHAPES)
def test_a_log_lines_json_is_the_models(shape: dict[str, Any]) -> None:
    now = time.time()
    for seq, text in enumerate(TEXTS, start=1):
        draft = {**shape, "text": text}
        fast = log_line_json("job-ü1", seq, now, draft)
        assert fast is not None
        assert json.loads(fast) == json.loads(_model_json("job-ü1", seq, now, draft))
        # The stored bytes validate into the very event the model's path made.
        expected = Event.model_validate({**draft, "job_id": "job-ü1", "seq": seq, "time": now})
        assert Event.model_validate_json(fast) == expected


@pytest.mark.parametrize(
    "draft",
    [
        {"kind": EventKind.status, "status": JobStatus.running},
        {"kind": EventKind.error, "text": "boom"},
        {"kind": EventKind.log, "stream": "stdout", "text": "x", "extra": 1},
        {"kind": EventKind.log, "stream": "other", "text": "x"},
        {"kind": EventKind.log, "stream": "stdout", "text": 3},
        {"kind": EventKind.log, "stream": "stdout"},
        {"kind": EventKind.log, "text": "x", "data": {"rank": "1"}},
        {"kind": EventKind.log, "text": "x", "data": {"rank": True}},
        {"kind": EventKind.log, "text": "x", "data": {"rank": 1, "host": "a"}},
        {"kind": EventKind.log, "text": "x", "data": [1]},
        {"kind": EventKind.log, "text": "x", "stage": "watch"},
    ],
)
def test_anything_but_a_plain_log_line_takes_the_models_path(draft: dict[str, Any]) -> None:
    assert log_line_json("job-1", 1, 1.5, draft) is None


def test_the_fields_the_registry_adds_must_be_what_the_model_takes() -> None:
    line = {"kind": EventKind.log, "text": "x"}
    assert log_line_json("job-1", 0, 1.5, line) is None  # seq starts at 1
    assert log_line_json("job-1", 1, 2, line) is None  # time is a float
    assert log_line_json("job-1", 1, 1.5, line) is not None


def test_a_stored_event_ends_the_job_only_when_it_is_a_terminal_status() -> None:
    for status in JobStatus:
        event = Event(job_id="j", seq=4, time=1.0, kind=EventKind.status, status=status)
        wire = WireEvent.stored(4, wire_json(event))
        assert wire.terminal is (status in TERMINAL_STATUSES)
        assert wire.to_event() == event
    look_alikes = [
        Event(job_id="j", seq=1, time=1.0, kind=EventKind.log, text='"status":"failed"'),
        Event(
            job_id="j",
            seq=1,
            time=1.0,
            kind=EventKind.progress,
            data={"kind": "status", "status": "failed"},
        ),
        Event(job_id="j", seq=1, time=1.0, kind=EventKind.error, text="status failed"),
    ]
    for event in look_alikes:
        assert not WireEvent.stored(1, wire_json(event)).terminal


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    registry = Registry(tmp_path / "registry.sqlite3")
    yield registry
    registry.close()


async def _running_job(registry: Registry) -> None:
    now = time.time()
    record = JobRecord(
        id="job-1",
        name="train.py",
        key="k1",
        status=JobStatus.running,
        request=JobRequest(code_path="/p", call_path="/p/train.py"),
        scheduler="local",
        created_at=now,
        updated_at=now,
    )
    await registry.jobs.create_or_attach(
        record, {"kind": EventKind.status, "status": JobStatus.running}
    )


async def test_what_is_stored_is_what_followers_and_readers_get(registry: Registry) -> None:
    await _running_job(registry)
    lines = [{**shape, "text": text} for shape in SHAPES for text in TEXTS[:6]]
    written = await registry.events.append_many("job-1", lines, log_cursor="9")
    await registry.events.append(
        "job-1",
        [{"kind": EventKind.status, "status": JobStatus.succeeded}],
        change=lambda r: setattr(r, "status", JobStatus.succeeded),
    )

    wires, status = await registry.events.read_wire("job-1")
    events, _ = await registry.events.read("job-1")
    assert status == JobStatus.succeeded
    assert [w.seq for w in wires] == [e.seq for e in events] == list(range(1, len(lines) + 3))
    assert [w.data for w in wires[1:-1]] == [w.data for w in written]
    assert [w.terminal for w in wires] == [False] * (len(lines) + 1) + [True]
    assert [w.to_event() for w in wires] == events
    for draft, event in zip(lines, events[1:-1], strict=True):
        assert (event.kind, event.text, event.stream) == (
            EventKind.log,
            draft["text"],
            draft.get("stream"),
        )
        assert event.data == draft.get("data", {})


async def test_a_line_the_model_refuses_is_refused_and_nothing_is_written(
    registry: Registry,
) -> None:
    await _running_job(registry)
    with pytest.raises(Exception, match="surrogates not allowed"):
        await registry.events.append_many(
            "job-1", [{"kind": "log", "text": "ok"}, {"kind": "log", "text": "\ud800"}]
        )
    events, _ = await registry.events.read("job-1")
    assert [e.kind for e in events] == [EventKind.status]
