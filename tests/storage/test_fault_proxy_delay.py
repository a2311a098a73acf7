"""The latency proxy's delay (tests/storage/fault_proxy.py ``delay_s``, used by
benchmarks/publish_latency.py) is one round trip per request and one per new connection, not one
per read of a request's body: a body sent in 20 pieces costs what a one-piece body does."""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.storage.fault_proxy import FaultProxy

DELAY_S = 0.2


class _Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def do_PUT(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        answer = str(len(body)).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    proxy = FaultProxy(f"http://127.0.0.1:{upstream.server_address[1]}", delay_s=DELAY_S)
    try:
        yield proxy.start()
    finally:
        proxy.stop()
        upstream.shutdown()
        upstream.server_close()


def _put(connection: http.client.HTTPConnection, pieces: int) -> None:
    """A PUT whose 64 KB body is written in ``pieces`` writes, a pause between them."""
    piece = b"x" * (65536 // pieces)
    connection.putrequest("PUT", "/blob")
    connection.putheader("Content-Length", str(len(piece) * pieces))
    connection.endheaders()
    for _ in range(pieces):
        connection.send(piece)
        time.sleep(0.001)
    answer = connection.getresponse()
    assert answer.read() == str(len(piece) * pieces).encode()


@pytest.mark.parametrize("pieces", [1, 20])
def test_each_request_and_each_new_connection_pay_one_delay(proxy: FaultProxy, pieces: int) -> None:
    port = int(proxy.url.rsplit(":", 1)[1])
    started = time.perf_counter()
    kept = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for _ in range(3):  # three requests on one kept-alive connection
        _put(kept, pieces)
    kept.close()
    fresh = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    _put(fresh, pieces)  # a new connection: its own round trip, then the request's
    fresh.close()
    elapsed = time.perf_counter() - started
    assert (proxy.connections, proxy.requests) == (2, 4)
    paid = 2 + 4  # connections + requests
    assert paid * DELAY_S <= elapsed < (paid + 3) * DELAY_S, elapsed  # per read: 76 more
