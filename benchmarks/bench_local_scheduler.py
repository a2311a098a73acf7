"""Local scheduler: job start-up and log latency, next to running the same command directly.

Measured, in one run:

- a trivial job (``python -c "print('hi')"``): submit → first log line, and submit → finished,
  with ``LocalScheduler`` (detached supervisor, log file, exit record) and with a plain
  ``subprocess.Popen`` reading a pipe (the floor: no scheduler at all);
- log latency: a job prints a timestamp every 10 ms; each line's delay from ``print`` in the job
  to the line arriving from ``follow_logs``, next to the same job followed through a pipe and
  through ``tail -F`` on a file (the usual "watch the log" tool).

Run: ``python benchmarks/bench_local_scheduler.py [--jobs 10] [--lines 300]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from j2c_server.config import J2CSettings
from j2c_server.models import JobStatus
from j2c_server.schedulers.base import JobSpec
from j2c_server.schedulers.local import LocalScheduler

TRIVIAL = [sys.executable, "-c", "print('hi')"]


def stamping(lines: int) -> list[str]:
    code = f"import time\nfor _ in range({lines}):\n    print(time.time(), flush=True)\n"
    return [sys.executable, "-c", code + "    time.sleep(0.01)\n"]


async def local_trivial(scheduler: LocalScheduler, index: int) -> tuple[float, float]:
    start = time.perf_counter()
    handle = await scheduler.submit(
        JobSpec(key=f"trivial-{index}", job_id=f"trivial-{index}", name="t", command=TRIVIAL)
    )
    first = None
    async for _line in scheduler.follow_logs(handle):
        first = first or time.perf_counter() - start
    state = await scheduler.status(handle)
    assert state.status == JobStatus.succeeded, state
    return first or float("nan"), time.perf_counter() - start


def popen_trivial() -> tuple[float, float]:
    start = time.perf_counter()
    with subprocess.Popen(TRIVIAL, stdout=subprocess.PIPE) as proc:
        assert proc.stdout is not None
        proc.stdout.readline()
        first = time.perf_counter() - start
        proc.stdout.read()
    return first, time.perf_counter() - start


async def local_latency(scheduler: LocalScheduler, lines: int) -> list[float]:
    handle = await scheduler.submit(
        JobSpec(key="latency", job_id="latency", name="latency", command=stamping(lines))
    )
    return [time.time() - float(line.text) async for line in scheduler.follow_logs(handle)]


def pipe_latency(lines: int) -> list[float]:
    with subprocess.Popen(stamping(lines), stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None
        return [time.time() - float(line) for line in proc.stdout]


def tail_latency(lines: int, folder: Path) -> list[float]:
    log = folder / "tail.log"
    log.touch()
    with (
        subprocess.Popen(
            ["tail", "-F", "-n", "+1", str(log)], stdout=subprocess.PIPE, text=True
        ) as tail,
        open(log, "w") as out,
        subprocess.Popen(stamping(lines), stdout=out) as job,
    ):
        assert tail.stdout is not None
        delays = []
        for _ in range(lines):
            stamp = float(tail.stdout.readline())  # read first, then look at the clock
            delays.append(time.time() - stamp)
        job.wait()
        tail.terminate()
    return delays


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def row(what: str, ours: float, peer: float, peer_name: str) -> str:
    return (
        f"| {what} | {ours * 1000:8.1f} | {peer * 1000:8.1f} | {peer_name} | {ours / peer:6.2f}x |"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10)
    parser.add_argument("--lines", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        scheduler = LocalScheduler(J2CSettings(data_dir=str(Path(tmp) / "data")))
        ours = [await local_trivial(scheduler, i) for i in range(args.jobs)]
        floor = [popen_trivial() for _ in range(args.jobs)]
        local = await local_latency(scheduler, args.lines)
        pipe = pipe_latency(args.lines)
        tail = tail_latency(args.lines, Path(tmp))

    median = statistics.median
    print(f"local scheduler, {args.jobs} trivial jobs, {args.lines} timestamped lines (ms)\n")
    print("| what | j2c local | peer | peer is | ratio |")
    print("|---|---|---|---|---|")
    print(
        row(
            "trivial job: submit → first line (median)",
            median(o[0] for o in ours),
            median(f[0] for f in floor),
            "Popen + pipe",
        )
    )
    print(
        row(
            "trivial job: submit → finished (median)",
            median(o[1] for o in ours),
            median(f[1] for f in floor),
            "Popen + pipe",
        )
    )
    for q in (50, 95, 99):
        print(row(f"print → line, p{q}", percentile(local, q), percentile(tail, q), "tail -F"))
    print(row("print → line, p95", percentile(local, 95), percentile(pipe, 95), "pipe (floor)"))
    print(f"\nprint → line, max: j2c {max(local) * 1000:.1f} ms, tail -F {max(tail) * 1000:.1f} ms")


if __name__ == "__main__":
    asyncio.run(main())
