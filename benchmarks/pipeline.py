"""Pipeline benchmark, through a real Jupyter server with j2c (local scheduler, file:// store).

Measured in one run:

- **cold submit** of the benchmark project with its ~400 MB venv (``benchmarks/inputs.py``):
  seconds to ``submitted``, and the server's event-loop lag while it packs and uploads (p99,
  from a 5 ms timer inside the server: ``benchmarks/lagprobe.py``);
- **resubmit after a one-line code change**: seconds from POST to ``submitted`` and bytes
  uploaded, next to ``tar | zstd -T0 -3`` of the same project + venv (what re-shipping
  everything would cost before any upload);
- **log latency**: a job prints its clock every 10 ms; each line's delay from ``print`` in the
  job to the websocket message in this client (p50/p95);
- **trivial job, layers cached**: POST → first log line, POST → finished.

Run: ``python benchmarks/pipeline.py [--lines 200]`` (builds the inputs on first use).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from tornado.websocket import websocket_connect

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import percentile
from inputs import BENCH_DIR, bench_project, bench_venv

HERE = Path(__file__).resolve().parent
LATENCY_PY = """\
import sys, time
for _ in range(int(sys.argv[1])):
    print(f"{time.time():.6f}", flush=True)
    time.sleep(0.01)
"""


class Server:
    """A Jupyter server subprocess with j2c and the lag probe, on loopback."""

    def __init__(self, root: Path, data: Path) -> None:
        self.root = root
        self.data = data
        self.token = secrets.token_hex(16)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.process: subprocess.Popen[bytes] | None = None
        self.http = AsyncHTTPClient()

    async def __aenter__(self) -> Server:
        # This folder (the lag probe) and whatever PYTHONPATH names: the j2c under test.
        paths = [str(HERE), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        env = {**os.environ, "J2C_DATA_DIR": str(self.data), "PYTHONPATH": os.pathsep.join(paths)}
        env.pop("J2C_CONFIG", None)
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jupyter_server",
                "--no-browser",
                f"--port={self.port}",
                "--ip=127.0.0.1",
                f"--IdentityProvider.token={self.token}",
                f"--ServerApp.root_dir={self.root}",
                "--ServerApp.allow_root=True",
                "--ServerApp.jpserver_extensions={'j2c_server': True, 'lagprobe': True}",
            ],
            env=env,
            cwd=self.data,  # not a checkout: ``-m`` puts the cwd first on sys.path
            stdout=subprocess.DEVNULL,
            stderr=open(self.data / "server.log", "wb"),  # noqa: SIM115
        )
        for _ in range(300):
            try:
                await self.get("api/status")
                return self
            except OSError:
                await asyncio.sleep(0.1)
        raise RuntimeError("the Jupyter server did not start; see server.log")

    async def __aexit__(self, *exc: object) -> None:
        assert self.process is not None
        self.process.terminate()
        self.process.wait(timeout=30)

    def _request(self, path: str, method: str = "GET", body: Any = None) -> HTTPRequest:
        return HTTPRequest(
            f"http://127.0.0.1:{self.port}/{path}",
            method=method,
            body=None if body is None else json.dumps(body),
            headers={"Authorization": f"token {self.token}"},
            request_timeout=600,
        )

    async def get(self, path: str) -> Any:
        return json.loads((await self.http.fetch(self._request(path))).body)

    async def post(self, path: str, body: Any) -> Any:
        return json.loads((await self.http.fetch(self._request(path, "POST", body))).body)

    @asynccontextmanager
    async def stream(self, job_id: str) -> AsyncIterator[AsyncIterator[tuple[float, Any]]]:
        request = self._request(f"j2c/api/jobs/{job_id}/stream")
        request.url = request.url.replace("http://", "ws://")
        ws = await websocket_connect(request)

        async def events() -> AsyncIterator[tuple[float, Any]]:
            while (message := await ws.read_message()) is not None:
                yield time.time(), json.loads(message)

        try:
            yield events()
        finally:
            ws.close()


async def submit_and_follow(server: Server, body: dict[str, Any]) -> dict[str, Any]:
    """POST a job and follow it to the end; seconds are from the POST."""
    start = time.time()
    record = await server.post("j2c/api/jobs", body)
    out: dict[str, Any] = {"id": record["id"], "latencies": [], "first_line": None}
    async with server.stream(record["id"]) as events:
        async for received, event in events:
            kind = event["kind"]
            if kind == "status" and event["status"] == "submitted":
                out["submitted"] = received - start
                out["lag_until_submitted"] = await server.get("lagprobe?reset=1")
            elif kind == "stage" and event.get("stage") == "upload" and "data" in event:
                out["bytes_uploaded"] = event["data"].get("bytes_uploaded")
            elif kind == "log":
                out["first_line"] = out["first_line"] or received - start
                text = event.get("text", "")
                if text.replace(".", "", 1).isdigit():
                    out["latencies"].append(received - float(text))
            elif kind == "status" and event["status"] in ("succeeded", "failed", "cancelled"):
                out["status"] = event["status"]
                out["finished"] = received - start
    return out


def tar_zstd_seconds(root: Path, names: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(
        f"tar -C {root} -cf - {' '.join(names)} | zstd -T0 -3 -q -c > /dev/null",
        shell=True,
        check=True,
    )
    return time.perf_counter() - start


async def main(lines: int) -> None:
    venv = bench_venv()
    project = BENCH_DIR / "pipeline-project"
    shutil.rmtree(project, ignore_errors=True)
    shutil.copytree(bench_project(), project)
    latency = BENCH_DIR / "pipeline-latency"
    latency.mkdir(exist_ok=True)
    (latency / "stamp.py").write_text(LATENCY_PY)
    heavy = {
        "code_path": project.name,
        "call_path": f"{project.name}/train.py",
        "venv_path": venv.name,
        "args": ["--epochs", "1"],
    }
    light = {"code_path": latency.name, "call_path": f"{latency.name}/stamp.py"}

    with tempfile.TemporaryDirectory(prefix="j2c-bench-") as data:
        async with Server(BENCH_DIR, Path(data)) as server:
            await server.get("lagprobe?reset=1")
            await asyncio.sleep(3)
            idle = await server.get("lagprobe?reset=1")
            cold = await submit_and_follow(server, heavy)
            with open(project / "train.py", "a") as handle:
                handle.write("# a one-line change\n")
            warm = await submit_and_follow(server, {**heavy, "new": True})
            log = await submit_and_follow(server, {**light, "args": [str(lines)]})
            await submit_and_follow(server, {**light, "args": ["1"]})
            trivial = await submit_and_follow(server, {**light, "args": ["1"], "new": True})
    naive = tar_zstd_seconds(BENCH_DIR, [project.name, venv.name])

    for job in (cold, warm, log, trivial):
        assert job.get("status") == "succeeded", job
    lat_ms = [1000 * x for x in log["latencies"]]
    rows = [
        ("cold submit (400 MB venv): s to submitted", cold["submitted"], None, "-"),
        (
            "  server loop lag while packing: p99 ms",
            cold["lag_until_submitted"]["p99_ms"],
            idle["p99_ms"],
            "<= 20",
        ),
        (
            "  server loop lag while packing: max ms",
            cold["lag_until_submitted"]["max_ms"],
            idle["max_ms"],
            "-",
        ),
        ("resubmit after 1-line change: s to submitted", warm["submitted"], naive, "<= 1.0"),
        ("  bytes uploaded", warm["bytes_uploaded"], cold["bytes_uploaded"], "code layer only"),
        ("log line -> websocket: p50 ms", statistics.median(lat_ms), None, "-"),
        ("log line -> websocket: p95 ms", percentile(lat_ms, 95), None, "<= 250"),
        ("trivial job (cached): s to first line", trivial["first_line"], None, "<= 1.0"),
        ("trivial job (cached): s to finished", trivial["finished"], None, "<= 1.5"),
    ]
    print(f"{'what':50} {'j2c':>12} {'baseline':>12} {'ratio':>8}  target")
    for what, value, base, target in rows:
        ratio = f"{value / base:8.3f}" if base else f"{'':8}"
        base_text = f"{base:12.3f}" if base else f"{'':12}"
        print(f"{what:50} {value:12.3f} {base_text} {ratio}  {target}")
    print(
        f"baselines: resubmit vs `tar | zstd -T0 -3` of project+venv ({naive:.2f} s, no upload); "
        f"bytes vs the cold submit's upload; loop lag vs the same server idle for 3 s. "
        f"{len(lat_ms)} log lines measured."
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lines", type=int, default=200, help="log lines in the latency job")
    asyncio.run(main(parser.parse_args().lines))
