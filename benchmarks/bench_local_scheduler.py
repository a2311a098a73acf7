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
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from j2c_server.config import J2CSettings
from j2c_server.schedulers.local.backend import LocalScheduler

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common


def popen_trivial() -> tuple[float, float]:
    start = time.perf_counter()
    with subprocess.Popen(common.TRIVIAL, stdout=subprocess.PIPE) as proc:
        assert proc.stdout is not None
        proc.stdout.readline()
        first = time.perf_counter() - start
        proc.stdout.read()
    return first, time.perf_counter() - start


def pipe_latency(lines: int) -> list[float]:
    with subprocess.Popen(common.stamping(lines), stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None
        return [time.time() - float(line) for line in proc.stdout]


def tail_latency(lines: int, folder: Path) -> list[float]:
    log = folder / "tail.log"
    with (
        common.tail_f(log) as tail,
        open(log, "w") as out,
        subprocess.Popen(common.stamping(lines), stdout=out) as job,
    ):
        assert tail.stdout is not None
        delays = common.read_delays(tail.stdout, lines)
        job.wait()
        tail.terminate()
    return delays


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10)
    parser.add_argument("--lines", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        scheduler = LocalScheduler(J2CSettings(data_dir=str(Path(tmp) / "data")))
        ours = [await common.trivial_timings(scheduler, f"trivial-{i}") for i in range(args.jobs)]
        floor = [popen_trivial() for _ in range(args.jobs)]
        local = await common.log_delays(scheduler, "latency", args.lines)
        pipe = pipe_latency(args.lines)
        tail = tail_latency(args.lines, Path(tmp))

    common.print_table(
        f"local scheduler, {args.jobs} trivial jobs, {args.lines} timestamped lines",
        "j2c local",
        [
            *common.startup_rows(ours, floor, "Popen + pipe", "Popen + pipe"),
            *common.latency_rows(local, tail, "tail -F"),
            *common.latency_rows(local, pipe, "pipe (floor)", qs=(95,)),
        ],
    )
    print(f"\nprint → line, max: j2c {max(local) * 1000:.1f} ms, tail -F {max(tail) * 1000:.1f} ms")


if __name__ == "__main__":
    asyncio.run(main())
