"""Shared by the benchmarks: the test jobs and their timing, percentiles, the table of ms.

The scheduler benchmarks (local, Slurm) time the same two jobs, a trivial one and one printing
timestamps, through a j2c scheduler and through the peer tool, and print the same Markdown
table: j2c's number, the peer's, and their ratio. ``pipeline.py`` uses the percentiles.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from j2c_server.schedulers.base import JobSpec, Scheduler
from j2c_server.wire.api import JobStatus

TRIVIAL = [sys.executable, "-c", "print('hi')"]


def stamping(lines: int) -> list[str]:
    """A job printing ``lines`` timestamps (``time.time()``), one every 10 ms."""
    code = f"import time\nfor _ in range({lines}):\n    print(time.time(), flush=True)\n"
    return [sys.executable, "-c", code + "    time.sleep(0.01)\n"]


async def trivial_timings(scheduler: Scheduler, job_id: str) -> tuple[float, float]:
    """Seconds from submitting the trivial job to its first log line, and to its end."""
    start = time.perf_counter()
    handle = await scheduler.submit(
        JobSpec(key=job_id, job_id=job_id, name="trivial", command=TRIVIAL)
    )
    first = None
    async for _line in scheduler.follow_logs(handle):
        first = first or time.perf_counter() - start
    state = await scheduler.status(handle)
    assert state.status == JobStatus.succeeded, state
    return first or float("nan"), time.perf_counter() - start


async def log_delays(scheduler: Scheduler, job_id: str, lines: int) -> list[float]:
    """Each line's delay from ``print`` in the stamping job to its arrival from follow_logs."""
    handle = await scheduler.submit(
        JobSpec(key=job_id, job_id=job_id, name="latency", command=stamping(lines))
    )
    return [time.time() - float(line.text) async for line in scheduler.follow_logs(handle)]


def tail_f(path: Path) -> subprocess.Popen[str]:
    """``tail -F`` of ``path`` from its first line (the usual "watch the log" tool)."""
    path.touch()
    return subprocess.Popen(
        ["tail", "-F", "-n", "+1", str(path)], stdout=subprocess.PIPE, text=True
    )


def read_delays(stream: IO[str], lines: int) -> list[float]:
    """Read ``lines`` timestamps as they arrive; each one's delay from ``print`` to here."""
    delays = []
    for _ in range(lines):
        stamp = float(stream.readline())  # read first, then look at the clock
        delays.append(time.time() - stamp)
    return delays


def percentile(values: Sequence[float], q: int) -> float:
    """The ``q``-th percentile (1..99), interpolated; NaN for fewer than two values."""
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def print_table(title: str, ours: str, rows: list[tuple[str, float, float, str]]) -> None:
    """A Markdown table of (what, j2c seconds, peer seconds, peer name), shown in ms."""
    print(f"{title} (ms)\n")
    print(f"| what | {ours} | peer | peer is | ratio |")
    print("|---|---|---|---|---|")
    for what, mine, peer, peer_name in rows:
        ratio = mine / peer
        print(f"| {what} | {mine * 1000:8.1f} | {peer * 1000:8.1f} | {peer_name} | {ratio:6.2f}x |")


def startup_rows(
    ours: list[tuple[float, float]],
    peers: list[tuple[float, float]],
    first_peer: str,
    finished_peer: str,
) -> list[tuple[str, float, float, str]]:
    """Median submit → first line and submit → finished of (first, finished) pairs."""
    median = statistics.median
    return [
        (
            "trivial job: submit → first line (median)",
            median(o[0] for o in ours),
            median(p[0] for p in peers),
            first_peer,
        ),
        (
            "trivial job: submit → finished (median)",
            median(o[1] for o in ours),
            median(p[1] for p in peers),
            finished_peer,
        ),
    ]


def latency_rows(
    ours: list[float], peer: list[float], peer_name: str, qs: Sequence[int] = (50, 95, 99)
) -> list[tuple[str, float, float, str]]:
    """print → line delay percentiles, next to the peer's."""
    return [
        (f"print → line, p{q}", percentile(ours, q), percentile(peer, q), peer_name) for q in qs
    ]
