"""A misbehaving HTTP reverse proxy for tests: it sits between a client and a real server (moto)
and fails chosen requests the way networks and overloaded stores do.

Faults (drawn at ``rate`` with a fixed seed, or queued one by one with ``queue``):

- ``"500"`` / ``"503"``: an S3 error response (InternalError / SlowDown) instead of forwarding;
- ``"reset"``: read the request, then reset the TCP connection without answering;
- ``"slow"``: forward, but answer only after ``slow_s`` seconds (beyond the client's timeout);
- ``"cut"``: forward, send the headers and half of the body, then reset the connection;
- ``"corrupt"``: forward the request with one byte of its body flipped (as a broken middlebox
  would), so the server stores other bytes than the client sent.

It also counts the request-body bytes it received (``bytes_up``), so a test can tell how much a
client really sent, and can answer every request with one canned S3 error (``canned``).

With ``delay_s`` it is a slow network (benchmarks/publish_latency.py): each new connection
waits ``delay_s`` before its first byte is read (the TCP handshake's round trip) and each
request waits ``delay_s`` before it is forwarded (its own round trip), however many reads its
body takes; the answer is not delayed again.
"""

from __future__ import annotations

import http.client
import random
import socket
import struct
import sys
import threading
import time
from collections import Counter, deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

FAULTS = ("500", "503", "reset", "slow", "cut", "corrupt")
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade"}


def s3_error_body(code: str, message: str) -> bytes:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
        f"<Message>{message}</Message><RequestId>j2c-fault-proxy</RequestId></Error>"
    ).encode()


class FaultProxy:
    """Start with ``start()``; point the client at ``url``; ``stop()`` when done. It listens
    on ``host`` (loopback unless a container must reach it)."""

    def __init__(
        self, upstream: str, *, seed: int = 1, host: str = "127.0.0.1", delay_s: float = 0.0
    ) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.rate = 0.0
        self.faults: tuple[str, ...] = FAULTS
        self.methods: frozenset[str] | None = None
        self.slow_s = 3.0
        self.canned: tuple[int, str, str] | None = None
        self.injected: Counter[str] = Counter()
        self.requests = 0
        self.connections = 0
        self.delay_s = delay_s
        self.bytes_up = 0
        self._queue: deque[str] = deque()
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._server = _QuietServer((host, 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def queue(self, *faults: str) -> None:
        """Inject these faults into the next eligible requests, in order."""
        with self._lock:
            self._queue.extend(faults)

    def reset_counters(self) -> None:
        with self._lock:
            self.injected.clear()
            self.requests = 0
            self.bytes_up = 0

    def _draw(self, method: str, received: int) -> str | None:
        with self._lock:
            self.requests += 1
            self.bytes_up += received
            if self.methods is not None and method not in self.methods:
                return None
            if self._queue:
                fault: str | None = self._queue.popleft()
            elif self.rate and self._random.random() < self.rate:
                fault = self._random.choice(self.faults)
            else:
                fault = None
            if fault:
                self.injected[fault] += 1
            return fault


class _QuietServer(ThreadingHTTPServer):
    """A client that went away (a killed server, a reset) is no error of the proxy's: not
    printed; anything else still is."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _handler_for(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(_ProxyHandler):
        pass

    Handler.proxy = proxy
    return Handler


class _ShortBody(Exception):
    """The request's body ended before its Content-Length."""


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    proxy: FaultProxy

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def setup(self) -> None:
        super().setup()
        with self.proxy._lock:
            self.proxy.connections += 1
        if self.proxy.delay_s:  # a new connection: the handshake's round trip
            time.sleep(self.proxy.delay_s)

    def do_GET(self) -> None:
        self._relay()

    do_PUT = do_POST = do_DELETE = do_HEAD = do_GET

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        expected = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(expected)
        if len(body) < expected:
            # The client went away mid-request (e.g. a server killed by the soak): a real store
            # never acts on a short body, so neither does the proxy (it once forwarded it with
            # its length corrected, and moto stored an empty manifest).
            raise _ShortBody(f"{len(body)} of {expected} bytes")
        return body

    def _reset(self) -> None:
        """Abort the connection with a TCP RST, as a crashed peer or a middlebox would."""
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()
        self.close_connection = True

    def _answer(self, status: int, body: bytes, headers: list[tuple[str, str]]) -> None:
        self.send_response_only(status)
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _relay(self) -> None:
        try:
            body = self._read_body()
        except (_ShortBody, ValueError, OSError):  # cut off mid-body, or a broken chunk size
            self.close_connection = True
            return
        proxy = self.proxy
        if proxy.delay_s:  # one round trip per request, not per read of its body
            time.sleep(proxy.delay_s)
        fault = proxy._draw(self.command, len(body))
        if proxy.canned is not None:
            status, code, message = proxy.canned
            error = s3_error_body(code, message)
            self._answer(status, error, [("Content-Length", str(len(error)))])
            return
        if fault in ("500", "503"):
            code = "InternalError" if fault == "500" else "SlowDown"
            error = s3_error_body(code, "injected by the fault proxy")
            headers = [("Content-Type", "application/xml"), ("Content-Length", str(len(error)))]
            self._answer(int(fault), error, headers)
            return
        if fault == "reset":
            self._reset()
            return
        if fault == "corrupt" and body:
            middle = len(body) // 2
            body = body[:middle] + bytes([body[middle] ^ 0xFF]) + body[middle + 1 :]
        status, headers, payload = self._forward(body)
        if fault == "slow":
            time.sleep(proxy.slow_s)
        try:
            if fault == "cut" and len(payload) > 1 and self.command == "GET":
                self.send_response_only(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload[: len(payload) // 2])
                self.wfile.flush()
                time.sleep(0.2)  # let the half body reach the client before the reset
                self._reset()
                return
            self._answer(status, payload, headers)
        except OSError:
            self.close_connection = True  # the client gave up (timed out) first

    def _forward(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        upstream = http.client.HTTPConnection(*self.proxy.upstream, timeout=60)
        try:
            headers = {
                name: value
                for name, value in self.headers.items()
                if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length"
            }
            headers["Content-Length"] = str(len(body))
            upstream.request(self.command, self.path, body=body, headers=headers)
            response = upstream.getresponse()
            payload = response.read()
            out = [
                (name, value)
                for name, value in response.getheaders()
                if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length"
            ]
            out.append(("Content-Length", str(len(payload))))
            if self.command == "HEAD":
                # A HEAD answer keeps the length of the object it describes.
                out[-1] = ("Content-Length", response.getheader("Content-Length", "0"))
            return response.status, out, payload
        finally:
            upstream.close()
