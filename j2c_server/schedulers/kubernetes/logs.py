"""Resumable reading of a pod's log, as served with ``timestamps=true``.

Every line the API server sends starts with its RFC 3339 timestamp. The cursor is the pod, the
timestamp of the last line delivered and how many lines carried exactly that timestamp. A
reconnect asks for ``sinceTime`` (whole seconds: the coarsest any server applies), then drops
every line older than the cursor and the first ``count`` lines at the cursor's own timestamp, so
nothing is repeated or skipped. This relies on the kubelet writing a container's lines in order
with non-decreasing timestamps, which it does (one log file per container).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import datetime, timezone

from j2c_server.core.errors import InvalidInput
from j2c_server.schedulers.base import LogLine

_TS_RE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$")


def timestamp_nanos(text: str) -> int | None:
    """Nanoseconds since the epoch of an RFC 3339 timestamp; None if ``text`` is not one."""
    match = _TS_RE.match(text)
    if match is None:
        return None
    whole, fraction, zone = match.groups()
    seconds = datetime.fromisoformat(whole + ("+00:00" if zone == "Z" else zone)).timestamp()
    return int(seconds) * 1_000_000_000 + int((fraction or "").ljust(9, "0"))


@dataclass(frozen=True)
class LogCursor:
    pod: str
    time: str = ""  # the timestamp of the last line delivered, as the server wrote it
    count: int = 0  # lines delivered that carry exactly that timestamp

    def encode(self) -> str:
        return f"{self.pod}|{self.time}|{self.count}"

    @classmethod
    def parse(cls, text: str) -> LogCursor:
        pod, sep1, rest = text.partition("|")
        time, sep2, count = rest.partition("|")
        if not (pod and sep1 and sep2 and count.isdigit()) or (
            time and timestamp_nanos(time) is None
        ):
            raise InvalidInput(f"cursor: {text!r} is not a Kubernetes log cursor", field="cursor")
        return cls(pod, time, int(count))

    def since_time(self) -> str | None:
        """``sinceTime`` for a reconnect: the cursor's second, rounded down."""
        nanos = timestamp_nanos(self.time) if self.time else None
        if nanos is None:
            return None
        moment = datetime.fromtimestamp(nanos // 1_000_000_000, tz=timezone.utc)
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class LogReader:
    """Splits one log response into lines after the cursor; feed it bytes as they arrive."""

    def __init__(self, cursor: LogCursor) -> None:
        self.cursor = cursor
        self._nanos = timestamp_nanos(cursor.time) if cursor.time else None
        self._replayed = cursor.count  # lines at the cursor's timestamp still to skip
        self._buffer = b""
        self.ended = False  # the response ended normally (it was not dropped)

    def feed(self, chunk: bytes) -> list[LogLine]:
        self._buffer += chunk
        *complete, self._buffer = self._buffer.split(b"\n")
        return [line for raw in complete if (line := self._line(raw)) is not None]

    def finish(self) -> list[LogLine]:
        """The response ended normally: its last line, if that had no newline."""
        self.ended = True
        raw, self._buffer = self._buffer, b""
        line = self._line(raw) if raw else None
        return [line] if line is not None else []

    def _line(self, raw: bytes) -> LogLine | None:
        text = raw.decode("utf-8", errors="replace").removesuffix("\r")
        stamp, _, body = text.partition(" ")
        nanos = timestamp_nanos(stamp)
        if nanos is None:  # not timestamped: deliver as is, the cursor cannot move
            return LogLine(text=text, cursor=self.cursor.encode())
        if self._nanos is not None:
            if nanos < self._nanos:
                return None
            if nanos == self._nanos and self._replayed > 0:
                self._replayed -= 1
                return None
        if nanos == self._nanos:
            self.cursor = replace(self.cursor, count=self.cursor.count + 1)
        else:
            self.cursor = replace(self.cursor, time=stamp, count=1)
            self._nanos, self._replayed = nanos, 0
        return LogLine(text=body, cursor=self.cursor.encode())
