"""The REST backends pointed at an address where another service answers (a real HTTP server
that serves an HTML page for every path): the error names the service, the request and the
setting to check, instead of a JSON decoding traceback."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from j2c_server.core.errors import SchedulerError
from j2c_server.schedulers.ray.rest import RayRest
from j2c_server.schedulers.ray.settings import RaySettings
from j2c_server.schedulers.slurm.rest import SlurmRest
from j2c_server.schedulers.slurm.settings import SlurmSettings


class _Page(BaseHTTPRequestHandler):
    def _answer(self) -> None:
        body = b"<html><body>a wiki, not a scheduler</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def other_service() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


async def test_slurm_at_another_service_names_slurmrestd_and_its_url_setting(
    other_service: str,
) -> None:
    rest = SlurmRest(SlurmSettings(url=other_service, user="alice", token="t"), environ={})
    try:
        with pytest.raises(SchedulerError) as caught:
            await rest.get("/jobs")
    finally:
        await rest.close()
    assert "slurmrestd answered GET /jobs with HTTP 200 and no JSON object" in str(caught.value)
    assert caught.value.hint is not None and "scheduler.slurm.url" in caught.value.hint


async def test_ray_at_another_service_names_the_dashboard_and_its_address_setting(
    other_service: str,
) -> None:
    rest = RayRest(RaySettings(address=other_service), environ={})
    try:
        with pytest.raises(SchedulerError) as caught:
            await rest.request("GET", "/api/jobs/")
    finally:
        await rest.close()
    assert "the Ray dashboard answered GET /api/jobs/ with HTTP 200 and no JSON object" in str(
        caught.value
    )
    assert caught.value.hint is not None and "scheduler.ray.address" in caught.value.hint
