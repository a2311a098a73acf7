"""Scale benchmark: one real Jupyter server with j2c, many running jobs, many websocket viewers.

Two phases on one server (local scheduler, ``file://`` store, jobs on this machine):

- **idle**: ``--idle-jobs`` running jobs that print nothing, followed by ``--idle-sockets``
  websockets in all; the server's CPU over ``--window`` seconds with the sockets open, next to
  the same server and jobs with none open (what the sockets themselves cost);
- **live**: ``--jobs`` jobs each printing ``--rate`` timestamped lines per second, ``--viewers``
  websockets per job; over ``--window`` seconds of steady state: print → websocket latency
  (p50/p95/max, every viewer's every line printed in the window; and the part of it before the
  line was persisted, i.e. the watcher's, from the event's registry time), the server's CPU
  (its whole process: loop, registry threads, log watchers), RSS, event-loop lag
  (``lagprobe.py``, a 5 ms timer in the server), and whether any viewer saw a seq out of order.
  Each job prints its count of lines last; a viewer that received fewer (or more) than its job
  printed fails the run (exit 1), as does a seq out of order: a line never delivered would
  otherwise drop out of the percentiles unseen.

Jobs print until a stop file appears, so every job runs through the whole window. The client
is one process; its own CPU is printed too (a saturated client inflates the latencies). Live
viewers read with ``wsreader.py`` (every frame of a socket read parsed in one loop, as a
browser does in C++), not tornado's client, whose cost per message saturated a core at 100 jobs.

Run: ``python benchmarks/scale.py [--jobs 20 --rate 20 --viewers 3 --idle-sockets 300]``. The
server imports j2c from ``PYTHONPATH`` (so a checkout of another commit can be measured).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
import wsreader
from common import percentile
from pipeline import Server

HERE = Path(__file__).resolve().parent
JOB_LIMIT_S = 900  # a job left behind by a killed run stops by itself
SETTLED_S = 1.0  # a viewer is past the start-up backlog when its newest line is this fresh
SETTLE_MAX_S = 120.0  # measured anyway after this: a server that never catches up
DELIVER_MAX_S = 60.0  # the window's lines not all delivered by then: stopped anyway
STAMP_PY = """\
import os, sys, time
rate, stop, limit = float(sys.argv[1]), sys.argv[2], float(sys.argv[3])
burst = int(sys.argv[4]) if len(sys.argv) > 4 else 1
start = time.time()
n = 0
while not os.path.exists(stop) and time.time() - start < limit:
    if rate > 0:
        stamp = f"{time.time():.6f}\\n"
        sys.stdout.write(stamp * burst)
        sys.stdout.flush()
        n += burst
        time.sleep(max(0.0, start + n / rate - time.time()))
    else:
        time.sleep(0.2)
print(f"printed {n}", flush=True)
"""


class Meter:
    """CPU seconds of a process (and its threads) over a window, as % of one core."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.start()

    def start(self) -> None:
        times = self.process.cpu_times()
        self._cpu = times.user + times.system
        self._wall = time.monotonic()

    def percent(self) -> float:
        times = self.process.cpu_times()
        return float(
            100 * (times.user + times.system - self._cpu) / (time.monotonic() - self._wall)
        )


class Viewer:
    """One websocket following one job; records each numeric line's print → receive delay."""

    def __init__(self, server: Server, job_id: str) -> None:
        self.server = server
        self.job_id = job_id
        # (printed, print -> websocket, print -> persisted in the registry)
        self.latencies: list[tuple[float, float, float]] = []
        self.seq = 0
        self.misordered = 0  # events not numbered last + 1: a line lost or doubled
        self.received = 0  # the job's timestamp lines this viewer got, in the window or not
        self.printed: int | None = None  # what the job says it printed, in its last line
        self.running = asyncio.Event()
        self.lines = asyncio.Event()
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        path = f"j2c/api/jobs/{self.job_id}/stream"
        async for batch in wsreader.messages(self.server.port, path, self.server.token):
            received = time.time()  # the batch came in one socket read
            for event in map(json.loads, batch):
                self.misordered += event["seq"] != self.seq + 1
                self.seq = event["seq"]
                if event["kind"] == "status" and event.get("status") == "running":
                    self.running.set()
                elif event["kind"] == "log":
                    text = event.get("text", "")
                    if text.startswith("printed "):
                        self.printed = int(text.split()[1])
                    elif text.replace(".", "", 1).isdigit():
                        self.received += 1
                        printed = float(text)
                        self.latencies.append(
                            (printed, received - printed, event["time"] - printed)
                        )
                        self.lines.set()


async def submit(server: Server, args: list[str], count: int) -> list[str]:
    body = {"code_path": "scale", "call_path": "scale/stamp.py", "args": args, "new": True}
    ids: list[str] = []
    for start in range(0, count, 10):  # a few at a time: each submit scans the project
        records = await asyncio.gather(
            *(server.post("j2c/api/jobs", body) for _ in range(min(10, count - start)))
        )
        ids.extend(record["id"] for record in records)
    return ids


async def idle_phase(server: Server, meter: Meter, args: argparse.Namespace) -> dict[str, Any]:
    stop = server.root / "stop-idle"
    jobs = await submit(server, ["0", str(stop), str(JOB_LIMIT_S)], args.idle_jobs)
    first = [Viewer(server, job) for job in jobs]
    await asyncio.wait_for(asyncio.gather(*(v.running.wait() for v in first)), 300)
    for viewer in first:
        viewer.task.cancel()
    await asyncio.sleep(1)
    meter.start()
    await asyncio.sleep(args.window)
    without = meter.percent()
    viewers = [Viewer(server, jobs[i % len(jobs)]) for i in range(args.idle_sockets)]
    await asyncio.wait_for(asyncio.gather(*(v.running.wait() for v in viewers)), 300)
    await asyncio.sleep(1)
    await server.get("lagprobe?reset=1")
    meter.start()
    client = Meter(os.getpid())
    await asyncio.sleep(args.window)
    out = {
        "cpu": meter.percent(),
        "cpu_without": without,
        "client_cpu": client.percent(),
        "lag": await server.get("lagprobe?reset=1"),
        "rss_mb": meter.process.memory_info().rss / 2**20,
    }
    stop.touch()
    await asyncio.wait_for(asyncio.gather(*(v.task for v in viewers), return_exceptions=True), 120)
    return out


async def live_phase(server: Server, meter: Meter, args: argparse.Namespace) -> dict[str, Any]:
    stop = server.root / "stop-live"
    argv = [str(args.rate), str(stop), str(JOB_LIMIT_S), str(args.burst)]
    jobs = await submit(server, argv, args.jobs)
    viewers = [Viewer(server, job) for job in jobs for _ in range(args.viewers)]
    await asyncio.wait_for(asyncio.gather(*(v.lines.wait() for v in viewers)), 600)
    # Past the start-up burst (lines printed while the other jobs were being submitted): the
    # window starts once every viewer's newest line is fresh, or after SETTLE_MAX_S.
    settle = time.monotonic()
    await asyncio.sleep(2)
    while time.monotonic() - settle < SETTLE_MAX_S and not all(
        v.latencies and v.latencies[-1][1] < SETTLED_S for v in viewers
    ):
        await asyncio.sleep(1)
    settled = time.monotonic() - settle
    await server.get("lagprobe?reset=1")
    meter.start()
    client = Meter(os.getpid())
    began = time.time()
    await asyncio.sleep(args.window)
    out = {
        "cpu": meter.percent(),
        "client_cpu": client.percent(),
        "lag": await server.get("lagprobe?reset=1"),
        "rss_mb": meter.process.memory_info().rss / 2**20,
        "settled_s": settled,
    }
    # Every line printed in the window delivered before the jobs are stopped: a hundred jobs
    # ending at once is a burst of work of its own, not the steady state measured here.
    ended = began + args.window
    drain = time.monotonic()
    while time.monotonic() - drain < DELIVER_MAX_S and not all(
        v.latencies and v.latencies[-1][0] > ended for v in viewers
    ):
        await asyncio.sleep(0.2)
    stop.touch()
    await asyncio.wait_for(asyncio.gather(*(v.task for v in viewers), return_exceptions=True), 300)
    lines = [
        (1000 * delay, 1000 * persisted)
        for viewer in viewers
        for printed, delay, persisted in viewer.latencies
        if began <= printed <= ended
    ]
    delays = [delay for delay, _ in lines] or [float("nan")]
    out["lines"] = len(lines)
    out["misordered"] = sum(viewer.misordered for viewer in viewers)
    # Every line each job printed, in or out of the window, must reach each of its viewers.
    out["short"] = [
        f"viewer of {v.job_id}: {v.received} lines, the job printed "
        + ("? (its last line never came)" if v.printed is None else str(v.printed))
        for v in viewers
        if v.printed is None or v.received != v.printed
    ]
    out["expected"] = args.jobs * args.viewers * args.rate * args.window
    out["latency"] = (statistics.median(delays), percentile(delays, 95), max(delays))
    # The part before j2c's followers: the job's output read and persisted by its watcher.
    out["persisted_p95"] = percentile([p for _, p in lines] or [float("nan")], 95)
    return out


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="j2c-scale-") as tmp:
        root = Path(tmp) / "root"
        (root / "scale").mkdir(parents=True)
        (root / "scale" / "stamp.py").write_text(STAMP_PY)
        old = time.time() - 3600  # settled files: the packer trusts their fingerprints
        os.utime(root / "scale" / "stamp.py", (old, old))
        data = Path(tmp) / "data"
        data.mkdir()
        async with Server(root, data) as server:
            assert server.process is not None
            meter = Meter(server.process.pid)
            # Killed (SIGTERM, e.g. by `timeout`): the jobs still stop and the server goes.
            task = asyncio.current_task()
            assert task is not None
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
            try:
                idle = await idle_phase(server, meter, args) if args.idle_sockets else None
                live = await live_phase(server, meter, args) if args.jobs else None
            finally:
                for name in ("stop-idle", "stop-live"):
                    (root / name).touch()

    print(f"{'what':58} {'value':>10}  target")
    if idle is not None:
        what = f"idle: {args.idle_sockets} websockets on {args.idle_jobs} quiet jobs"
        rows: list[tuple[str, float, str]] = [
            (f"{what}: server CPU %", idle["cpu"], "-"),
            ("  same jobs, no websocket: server CPU %", idle["cpu_without"], "-"),
            (
                "  the websockets' own cost: CPU % of a core",
                idle["cpu"] - idle["cpu_without"],
                "<= 5",
            ),
            ("  server loop lag p99 ms", idle["lag"]["p99_ms"], "-"),
            ("  server RSS MB", idle["rss_mb"], "-"),
            ("  client CPU %", idle["client_cpu"], "-"),
        ]
        for row in rows:
            print(f"{row[0]:58} {row[1]:10.1f}  {row[2]}")
    if live is not None:
        p50, p95, most = live["latency"]
        what = f"live: {args.jobs} jobs x {args.rate} lines/s x {args.viewers} viewers"
        if args.burst > 1:
            what += f" ({args.burst}/write)"
        rows = [
            (f"{what}: print -> ws p50 ms", p50, "-"),
            ("  print -> websocket p95 ms", p95, "<= 250"),
            ("  print -> websocket max ms", most, "-"),
            ("  of which print -> registry (the watcher) p95 ms", live["persisted_p95"], "-"),
            ("  server CPU % (100 = one core)", live["cpu"], "<= 100"),
            ("  server loop lag p99 ms", live["lag"]["p99_ms"], "<= 50"),
            ("  server loop lag max ms", live["lag"]["max_ms"], "-"),
            ("  server RSS MB", live["rss_mb"], "-"),
            ("  client CPU %", live["client_cpu"], "-"),
            ("  lines received in the window", live["lines"], f"~{live['expected']:.0f}"),
            ("  events lost, doubled or out of order (by seq)", live["misordered"], "0"),
            (
                "  start-up backlog drained after s (window then)",
                live["settled_s"],
                f"< {SETTLE_MAX_S:.0f}: caught up",
            ),
        ]
        for row in rows:
            print(f"{row[0]:58} {row[1]:10.1f}  {row[2]}")
        rows = [
            ("  viewers that got fewer or more lines than printed", len(live["short"]), "0"),
        ]
        for row in rows:
            print(f"{row[0]:58} {row[1]:10.0f}  {row[2]}")
        for line in live["short"][:10]:
            print(f"  short: {line}")
        if live["short"] or live["misordered"]:
            sys.exit("scale: lines lost, doubled or out of order: the latencies leave them out")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=20, help="live jobs (0: skip the phase)")
    parser.add_argument("--rate", type=float, default=20, help="lines per second per live job")
    parser.add_argument("--viewers", type=int, default=3, help="websockets per live job")
    parser.add_argument(
        "--burst",
        type=int,
        default=1,
        help="lines a job prints per write (same rate): 100 jobs printing one line per wake-up "
        "need more than this machine's 2 cores themselves",
    )
    parser.add_argument("--idle-sockets", type=int, default=300, help="0: skip the idle phase")
    parser.add_argument("--idle-jobs", type=int, default=10, help="quiet jobs they follow")
    parser.add_argument("--window", type=float, default=10, help="seconds measured per phase")
    asyncio.run(main(parser.parse_args()))
