"""A Jupyter server extension for benchmarks only: measures the server's event-loop lag.

A task sleeps 5 ms at a time and records how late it wakes up; ``GET /lagprobe`` returns the
percentiles since the last ``?reset=1``. Loaded by ``benchmarks/pipeline.py`` through
``jpserver_extensions`` with ``benchmarks/`` on ``PYTHONPATH``; never part of j2c itself.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web
from tornado.ioloop import IOLoop

INTERVAL_S = 0.005
_samples: list[float] = []
_tasks: set[asyncio.Task[None]] = set()


async def _probe() -> None:
    loop = asyncio.get_running_loop()
    while True:
        start = loop.time()
        await asyncio.sleep(INTERVAL_S)
        _samples.append(max(0.0, loop.time() - start - INTERVAL_S))


def _percentile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))] if values else 0.0


class LagHandler(APIHandler):  # type: ignore[misc]
    @web.authenticated
    def get(self) -> None:
        values = sorted(_samples)
        if self.get_argument("reset", ""):
            _samples.clear()
        self.finish(
            json.dumps(
                {
                    "samples": len(values),
                    "p50_ms": 1000 * _percentile(values, 0.50),
                    "p99_ms": 1000 * _percentile(values, 0.99),
                    "max_ms": 1000 * (values[-1] if values else 0.0),
                }
            )
        )


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    return [{"module": "lagprobe"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    base = serverapp.web_app.settings["base_url"]
    serverapp.web_app.add_handlers(".*$", [(url_path_join(base, "lagprobe"), LagHandler)])
    IOLoop.current().add_callback(lambda: _tasks.add(asyncio.ensure_future(_probe())))
