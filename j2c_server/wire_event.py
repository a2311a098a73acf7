"""An event with the bytes clients are sent, made once however many followers it has.

The fan-out (:mod:`.eventbus`) and the websocket carry :class:`WireEvent`; a job printing
hundreds of lines a second to several viewers would otherwise serialise each line once per
viewer. The bytes are what the registry stores for the event (its JSON, defaults left out).
"""

from __future__ import annotations

from dataclasses import dataclass

from .models import Event


@dataclass(frozen=True, slots=True)
class WireEvent:
    event: Event
    data: bytes

    @classmethod
    def of(cls, event: Event) -> WireEvent:
        return cls(event, wire_json(event).encode())

    @property
    def seq(self) -> int:
        return self.event.seq

    @property
    def terminal(self) -> bool:
        return self.event.terminal


def wire_json(event: Event) -> str:
    """The event's JSON as stored and sent."""
    return event.model_dump_json(exclude_defaults=True)
