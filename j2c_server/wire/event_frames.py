"""An event as clients are sent it: its JSON bytes and websocket frame, made once however many
followers it has, and the JSON of a log line made without the model.

The fan-out (:mod:`.eventbus`) and the websocket carry :class:`WireEvent`; a job printing
hundreds of lines a second to several viewers would otherwise serialise each line once per
viewer. The bytes are what the registry stores for the event (its JSON, defaults left out).
A wire event read back from the registry is not parsed: those are bytes the registry's own
writers made (after validation), and a follower needs only their seq, given by the row, and
whether the event ends the job. With a hundred jobs printing, validating each line on the way
in and again on the way out to a viewer that fell behind was the server's largest cost.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from j2c_server.core.j2c_lines import format_line
from j2c_server.wire.api import TERMINAL_STATUSES, Event, EventKind, LineOrigin

_TERMINAL_VALUES = frozenset(status.value for status in TERMINAL_STATUSES)
_LOG_KEYS = frozenset({"kind", "stream", "text", "data"})
_STREAMS = frozenset({"stdout", "stderr"})
json_string = json.encoder.encode_basestring  # the C encoder; non-ASCII kept, as pydantic does


@dataclass(frozen=True, slots=True)
class WireEvent:
    seq: int
    terminal: bool  # the job's terminal status event: nothing follows it
    data: bytes
    # The websocket text frame of ``data``: built once, however many viewers write it.
    frame: bytes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "frame", text_frame(self.data))

    @classmethod
    def of(cls, event: Event) -> WireEvent:
        return cls(event.seq, event.terminal, wire_json(event).encode())

    @classmethod
    def stored(cls, seq: int, text: str) -> WireEvent:
        """A registry row's event, unparsed (only a status event is read, for ``terminal``)."""
        data = text.encode()
        return cls(seq, b'"status"' in data and _ends_job(data), data)

    def to_event(self) -> Event:
        return Event.model_validate_json(self.data)


def _ends_job(data: bytes) -> bool:
    parsed = json.loads(data)
    return parsed.get("kind") == EventKind.status.value and parsed.get("status") in _TERMINAL_VALUES


def text_frame(payload: bytes) -> bytes:
    """One unfragmented, unmasked (server to client) websocket text frame (RFC 6455, 5.2)."""
    size = len(payload)
    if size < 126:
        return struct.pack("!BB", 0x81, size) + payload
    if size <= 0xFFFF:
        return struct.pack("!BBH", 0x81, 126, size) + payload
    return struct.pack("!BBQ", 0x81, 127, size) + payload


def wire_json(event: Event) -> str:
    """The event's JSON as stored and sent."""
    return event.model_dump_json(exclude_defaults=True)


def diary_text(event: Mapping[str, Any]) -> str:
    """A log event's line as the job's diary shows it (``j2c logs --verbose``, "Download log",
    the notes read from the last lines): the job's text as written; j2c's as j2c-unpack writes
    it without a tag, ``j2c: <phase>: <text>``. ``event``: the event's JSON, parsed (or a
    model's dump)."""
    text = str(event.get("text") or "")
    if event.get("origin") != LineOrigin.j2c.value:
        return text
    return format_line(None, "info", str(event.get("phase") or "j2c"), text)


def log_line_json(job_id: str, seq: int, time: float, draft: Mapping[str, Any]) -> str | None:
    """A plain log line's event JSON, as ``wire_json`` of the validated event would give it
    (the same object; a test compares them over many drafts), made without the model; None for
    any other draft, which takes the model's path (and its validation)."""
    if draft.get("kind") != EventKind.log.value or not _LOG_KEYS.issuperset(draft):
        return None
    text, stream, data = draft.get("text"), draft.get("stream"), draft.get("data")
    if type(text) is not str or (stream is not None and stream not in _STREAMS):
        return None
    if type(seq) is not int or seq < 1 or type(time) is not float or type(job_id) is not str:
        return None
    rank = None
    if data:
        rank = data.get("rank") if isinstance(data, dict) and len(data) == 1 else None
        if type(rank) is not int:
            return None
    elif data is not None and data != {}:
        return None
    head = f'{{"job_id":{json_string(job_id)},"seq":{seq},"time":{time!r},"kind":"log"'
    if stream is not None:
        head += f',"stream":"{stream}"'
    head += f',"text":{json_string(text)}'
    return head + ("}" if rank is None else f',"data":{{"rank":{rank}}}}}')
