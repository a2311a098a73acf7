"""The Docker Engine API over a unix socket (podman's or Docker's), and reading its logs.

- :class:`EngineClient`: httpx over the socket; an unreachable engine is
  :class:`~j2c_server.core.errors.SchedulerUnavailable` (worth retrying), an error reply a
  :class:`~j2c_server.core.errors.SchedulerError` with the engine's own message.
- :class:`LogCursor` / :class:`LogReader`: ``GET /containers/{name}/logs?timestamps=1`` arrives
  as multiplexed frames (8-byte header: stream, 0, 0, 0, big-endian size), each entry starting
  with an RFC 3339 timestamp. A cursor is the last delivered entry's timestamp (ns) and how many
  entries with exactly that timestamp were delivered; a reader asks from that second on and skips
  what the cursor covers, so a resumed follow loses and doubles nothing.
"""

from __future__ import annotations

import asyncio
import calendar
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from j2c_server.core.errors import InvalidInput, SchedulerError, SchedulerUnavailable
from j2c_server.schedulers.base import LogLine

_TIMESTAMP_RE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$")
_STREAMS: dict[int, Literal["stdout", "stderr"]] = {1: "stdout", 2: "stderr"}
# A follow stream that stays silent this long is re-opened from its cursor, after the container's
# state is read again: podman may keep a follow stream open after its container exited (seen
# when the container exits as the follow starts), and the job's watch must not wait on it.
FOLLOW_IDLE_S = 10.0
INSPECT_TRIES = 4  # an inspect racing the container's exit (see inspect)


class EngineClient:
    """Requests to one engine; ``path`` is the API path without the version prefix."""

    def __init__(self, socket: str, api_version: str) -> None:
        self.socket = socket
        self._prefix = f"/{api_version}"
        self._client = httpx.AsyncClient(
            transport=httpx.AsyncHTTPTransport(uds=socket),
            base_url="http://engine",
            timeout=httpx.Timeout(60.0, connect=10.0),
        )

    async def request(
        self, method: str, path: str, *, allow: tuple[int, ...] = (), **kwargs: Any
    ) -> httpx.Response:
        try:
            response = await self._client.request(method, self._prefix + path, **kwargs)
        except httpx.TransportError as exc:
            raise self.unreachable(exc) from None
        if response.status_code >= 400 and response.status_code not in allow:
            raise engine_error(response)
        return response

    @asynccontextmanager
    async def stream(self, path: str, **kwargs: Any) -> AsyncIterator[httpx.Response]:
        try:
            async with self._client.stream("GET", self._prefix + path, **kwargs) as response:
                yield response
        except httpx.ConnectError as exc:
            raise self.unreachable(exc) from None

    def unreachable(self, exc: Exception) -> SchedulerUnavailable:
        return SchedulerUnavailable(
            f"cannot reach the container engine at {self.socket}: {exc!s}",
            hint="start it (podman system service, or the Docker daemon) or set "
            "scheduler.container.socket",
        )

    async def inspect(self, name: str) -> dict[str, Any] | None:
        """The container's inspect document; None when the engine has no such container.

        podman answers 500 "read /proc/<pid>/cgroup: no such process" when the container's
        process exits while it is inspected: a race of the engine's, asked again."""
        for attempt in range(INSPECT_TRIES):
            response = await self.request("GET", f"/containers/{name}/json", allow=(404, 500))
            if response.status_code != 500:
                break
            if "no such process" not in response.text or attempt == INSPECT_TRIES - 1:
                raise engine_error(response)
            await asyncio.sleep(0.05 * (attempt + 1))
        if response.status_code == 404:
            return None
        info: dict[str, Any] = response.json()
        return info

    async def aclose(self) -> None:
        await self._client.aclose()


def engine_error(response: httpx.Response) -> SchedulerError:
    try:
        message = str(response.json().get("message") or response.reason_phrase)
    except ValueError:
        message = response.text[:500] or response.reason_phrase
    code = response.status_code
    if code >= 500 and "no such image" not in message.lower():
        return SchedulerUnavailable(f"the container engine failed ({code}): {message}")
    return SchedulerError(f"the container engine answered {code}: {message}")


def parse_timestamp(text: str) -> int | None:
    """RFC 3339 (any fraction, ``Z`` or an offset) → ns since the epoch; None if it is not one."""
    match = _TIMESTAMP_RE.match(text)
    if match is None:
        return None
    base, fraction, zone = match.groups()
    seconds = calendar.timegm(time.strptime(base, "%Y-%m-%dT%H:%M:%S"))
    if zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        seconds -= sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    return seconds * 1_000_000_000 + int((fraction or "").ljust(9, "0"))


@dataclass(frozen=True)
class LogCursor:
    """Just after the ``count``-th log entry stamped ``ns``."""

    ns: int = 0
    count: int = 0

    @classmethod
    def parse(cls, text: str | None) -> LogCursor:
        if not text:
            return cls()
        ns, sep, count = text.partition(":")
        if not sep or not ns.isdigit() or not count.isdigit():
            raise InvalidInput(
                f"log cursor {text!r} is not a container log cursor (<ns>:<count>)",
                field="cursor",
            )
        return cls(int(ns), int(count))

    def __str__(self) -> str:
        return f"{self.ns}:{self.count}"

    def since(self) -> str:
        """The ``since`` to ask with: the cursor's whole second (engines differ on whether
        ``since`` is inclusive and how precise it is; the reader skips the rest itself)."""
        return str(self.ns // 1_000_000_000)

    def after(self, ns: int) -> LogCursor:
        return LogCursor(ns, self.count + 1 if ns == self.ns else 1)


@dataclass
class LogReader:
    """Turns one log response's bytes into lines after ``cursor``; feed it chunk by chunk."""

    cursor: LogCursor
    _frames: bytearray = field(default_factory=bytearray)
    _seen: LogCursor = field(default_factory=LogCursor)
    # An entry without its newline (a long line the engine split) waits for the rest.
    _pending: list[str] = field(default_factory=list)
    _pending_stream: Literal["stdout", "stderr"] = "stdout"
    _pending_at: LogCursor | None = None

    def feed(self, chunk: bytes) -> list[LogLine]:
        self._frames += chunk
        lines: list[LogLine] = []
        while len(self._frames) >= 8:
            size = int.from_bytes(self._frames[4:8], "big")
            if len(self._frames) < 8 + size:
                break
            stream = _STREAMS.get(self._frames[0], "stdout")
            payload = bytes(self._frames[8 : 8 + size])
            del self._frames[: 8 + size]
            # Only "\n" ends an entry: a "\r" (progress bars) stays inside its line.
            for entry in re.findall(r"[^\n]*\n|[^\n]+$", payload.decode("utf-8", "replace")):
                lines.extend(self._entry(stream, entry))
        return lines

    def _entry(self, stream: Literal["stdout", "stderr"], entry: str) -> list[LogLine]:
        stamp, _, text = entry.partition(" ")
        ns = parse_timestamp(stamp)
        if ns is None:  # a line of a multi-line entry: counted at the entry's time
            ns, text = self._seen.ns, entry
        self._seen = self._seen.after(ns)
        if ns < self.cursor.ns or (ns == self.cursor.ns and self._seen.count <= self.cursor.count):
            return []  # delivered before this cursor
        out: list[LogLine] = []
        if self._pending and stream != self._pending_stream:
            out.extend(self._flush())
        ended = text.endswith("\n")
        self._pending.append(text[:-1] if ended else text)
        self._pending_stream = stream
        self._pending_at = self._seen
        if ended:
            out.extend(self._flush())
        return out

    def _flush(self) -> list[LogLine]:
        if not self._pending or self._pending_at is None:
            return []
        self.cursor = self._pending_at
        line = LogLine(
            text="".join(self._pending),
            stream=self._pending_stream,
            cursor=str(self.cursor),
        )
        self._pending = []
        return [line]

    def finish(self) -> list[LogLine]:
        """The unterminated last line, once the container has ended."""
        return self._flush()
