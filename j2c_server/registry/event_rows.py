"""An event as the registry stores it: drafts numbered after a job's last ``seq``, in their wire
form (:class:`~j2c_server.wire.event_frames.WireEvent`) and their stored JSON, inserted.

A row of ``events`` holds ``span`` events numbered from its ``seq``: their JSON texts joined by
newlines (JSON never holds a raw newline). One event is a row of span 1; a watcher's batch of
log lines is one row (:func:`batch_row`); :func:`split_row` gives a row's events back.

Used by every statement that adds events: a job's first event (:mod:`.jobs_table`), appends
(:mod:`.event_log`) and the group commit's batches (:mod:`.batch`).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from typing import Any

from j2c_server.wire.api import Event
from j2c_server.wire.event_frames import WireEvent, log_line_json, wire_json

# The fields of an event that its writer chooses; the registry adds job_id, seq and time.
EventDraft = dict[str, Any]
# (job id, first seq, span, the events' JSON joined by newlines): a row as inserted.
EventRow = tuple[str, int, int, str]


def make_events(
    job_id: str, last_seq: int, drafts: Sequence[EventDraft]
) -> tuple[list[WireEvent], list[str]]:
    """The drafts as events numbered after ``last_seq``: their wire form and stored JSON."""
    now = time.time()
    wires: list[WireEvent] = []
    texts: list[str] = []
    for seq, draft in enumerate(drafts, start=last_seq + 1):
        # A plain log line (most events) skips the model; anything else is validated.
        text = log_line_json(job_id, seq, now, draft)
        wire = None if text is None else _log_wire(seq, text)
        if text is None or wire is None:
            event = Event.model_validate({**draft, "job_id": job_id, "seq": seq, "time": now})
            text = wire_json(event)
            wire = WireEvent(seq, event.terminal, text.encode())
        texts.append(text)
        wires.append(wire)
    return wires, texts


def insert_events(
    conn: sqlite3.Connection, job_id: str, last_seq: int, drafts: Sequence[EventDraft]
) -> list[WireEvent]:
    """Insert the drafts as the job's next events (inside the caller's write transaction)."""
    wires, texts = make_events(job_id, last_seq, drafts)
    conn.executemany(
        "INSERT INTO events (job_id, seq, event) VALUES (?, ?, ?)",
        [(job_id, wire.seq, text) for wire, text in zip(wires, texts, strict=True)],
    )
    return wires


def _log_wire(seq: int, text: str) -> WireEvent | None:
    try:
        return WireEvent(seq, False, text.encode())
    except UnicodeEncodeError:  # a lone surrogate: the model's path says what is wrong
        return None


def batch_row(job_id: str, first_seq: int, texts: Sequence[str]) -> EventRow:
    """Events numbered from ``first_seq`` as one row."""
    return (job_id, first_seq, len(texts), "\n".join(texts))


def split_row(seq: int, span: int, event: str) -> list[tuple[int, str]]:
    """A stored row's events: (seq, JSON) each, in order."""
    if span == 1:
        return [(seq, event)]
    texts = event.split("\n")
    if len(texts) != span:
        raise ValueError(f"an events row at seq {seq} holds {len(texts)} events, not {span}")
    return list(enumerate(texts, start=seq))
