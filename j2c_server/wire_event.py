"""An event with the bytes clients are sent, made once however many followers it has.

The fan-out (:mod:`.eventbus`) and the websocket carry :class:`WireEvent`; a job printing
hundreds of lines a second to several viewers would otherwise serialise each line once per
viewer. The bytes are what the registry stores for the event (its JSON, defaults left out);
the websocket frame of them is made once too.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from .models import Event


@dataclass(frozen=True, slots=True)
class WireEvent:
    event: Event
    data: bytes
    # The websocket text frame of ``data``: built once, however many viewers write it.
    frame: bytes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "frame", text_frame(self.data))

    @classmethod
    def of(cls, event: Event) -> WireEvent:
        return cls(event, wire_json(event).encode())

    @property
    def seq(self) -> int:
        return self.event.seq

    @property
    def terminal(self) -> bool:
        return self.event.terminal


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
