"""The websocket of one job's events: a replay from ``after``, then live events pushed from the
job's fan-out feed (:class:`~.eventbus.Fanout`), written as pre-framed text frames so a burst
costs one socket write; closed only once the client has confirmed, by a pong, that it holds the
last events."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Awaitable

from jupyter_server.base.websocket import WebSocketMixin
from tornado.iostream import StreamClosedError
from tornado.websocket import WebSocketClosedError, WebSocketHandler, WebSocketProtocol13

from j2c_server.core.errors import J2CError
from j2c_server.server.handler_base import AUTH_RESOURCE, MAX_SEQ, READ, J2CErrors, ws_requires
from j2c_server.wire.event_frames import WireEvent

CLOSE_FLUSH_S = 60.0  # how long a client may take to confirm that it has the last events


class EventStreamHandler(WebSocketMixin, WebSocketHandler, J2CErrors):
    """``/jobs/{id}/stream?after=N``: replays the events after N, then sends live ones, one
    JSON text message each, and closes after the terminal status event. The job goes on when
    the socket closes; a client that reconnects with its last seq misses nothing."""

    _pump: asyncio.Task[None] | None = None
    _confirm: tuple[bytes, asyncio.Future[None]] | None = None  # the last events' ping

    def set_default_headers(self) -> None:
        """No page headers on a websocket (as jupyter_server's kernel websocket)."""

    auth_resource = AUTH_RESOURCE

    @ws_requires(READ)
    async def get(self, job_id: str) -> None:
        # Bad input is a 400 before the upgrade, never a sender that dies after it.
        self._after = self.int_argument("after", 0, maximum=MAX_SEQ)
        await self.service.get(job_id)  # an unknown job is a 404 before the upgrade
        await super().get(job_id)

    def open(self, job_id: str) -> None:
        super().open()
        self._frames: list[bytes] = []
        self._flushed: asyncio.Future[None] | None = None
        self._pump = asyncio.create_task(self._send_events(job_id))

    async def _send_events(self, job_id: str) -> None:
        try:
            async for batch in self.service.stream_wire(job_id, self._after):
                slow = self._send(batch)
                if slow is not None:
                    # Back-pressure: a slow browser holds what the kernel's socket buffer
                    # holds plus one step's frames, then its follower's bounded queue; then
                    # it is caught up from the registry by seq. Never a growing buffer here.
                    await slow
        except (WebSocketClosedError, StreamClosedError):
            return
        except J2CError as exc:  # e.g. the server is stopping: 4503
            # A close frame's reason holds at most 123 bytes.
            reason = exc.message.encode()[:120].decode(errors="ignore")
            await self._close_after_events(4000 + exc.status_code, reason)
            return
        except Exception:
            # A bug must still end the stream with a close the client can see.
            self.log.exception("j2c: event stream of %s failed (%s)", job_id, self.scrubbed_uri)
            await self._close_after_events(1011, "internal error; see the server log")
            return
        await self._close_after_events(1000, "job finished")

    async def _close_after_events(self, code: int, reason: str) -> None:
        """Close once the client has confirmed that it holds every event frame: a ping sent
        after them, answered by its pong (frames, then pings and pongs, keep their order).

        Frames in the kernel's socket buffers are not at the client yet. Tornado drops the
        connection 5 s after its close frame if the client has not answered; the client's next
        pong (or its close answer) then reaches a closed socket, whose kernel answers with a
        reset and discards what it still held: a slow reader lost the last events so, with no
        close frame on either side. After the pong only the close frame is left to send."""
        self._flush()
        try:
            confirmed = await self._confirmed(CLOSE_FLUSH_S)
        except WebSocketClosedError:
            return  # the connection is gone: nothing to close
        if not confirmed:
            # Bounded: a client that stopped reading altogether is closed on anyway. Whatever
            # reads this close frame has every event before it; a client that does not see it
            # sees an abnormal end (1006), never a clean one.
            self.log.warning(
                "j2c: a viewer did not confirm the last events within %.0f s; closing (%s)",
                CLOSE_FLUSH_S,
                self.scrubbed_uri,
            )
        self.close(code, reason)

    async def _confirmed(self, timeout: float) -> bool:
        """Whether the client answered, within ``timeout``, a ping sent after every frame so
        far."""
        token = secrets.token_bytes(8)
        confirmed = asyncio.get_running_loop().create_future()
        self._confirm = (token, confirmed)
        self.ping(token)
        await asyncio.wait({confirmed}, timeout=timeout)
        return confirmed.done()

    def on_pong(self, data: bytes) -> None:
        super().on_pong(data)  # type: ignore[no-untyped-call]  # Jupyter's keep-alive
        if self._confirm is not None and data == self._confirm[0]:
            confirmed = self._confirm[1]
            if not confirmed.done():
                confirmed.set_result(None)

    def _send(self, batch: list[WireEvent]) -> Awaitable[None] | None:
        """Send each event as one text message. The messages of one loop step (a burst of
        events) leave in one socket write at the step's end, not one write and one task each
        as through ``write_message``; each event's frame is made once for all its followers.
        Returns what to await when the client reads slower than that."""
        conn = self.ws_connection
        if conn is None or conn.is_closing():
            raise WebSocketClosedError
        if not isinstance(conn, WebSocketProtocol13) or self.get_compression_options() is not None:
            written = None
            for event in batch:  # deflating: tornado frames each message
                written = self.write_message(event.data.decode())
            return written
        self._frames.append(b"".join([event.frame for event in batch]))
        if len(self._frames) == 1:
            asyncio.get_running_loop().call_soon(self._flush)
        if self._flushed is not None and not self._flushed.done():
            return self._flushed
        return None

    def _flush(self) -> None:
        stream = getattr(self.ws_connection, "stream", None)
        if not self._frames or stream is None:
            return
        frames, self._frames = self._frames, []
        with contextlib.suppress(StreamClosedError):  # the next send says so
            self._flushed = stream.write(b"".join(frames))

    def on_message(self, message: str | bytes) -> None:
        """Clients only listen."""

    def on_close(self) -> None:
        if self._pump is not None:
            self._pump.cancel()
