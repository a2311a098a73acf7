"""Slurm backend: job start-up and log latency, next to what a Slurm user does by hand.

Against a real Slurm: the one named by exported ``J2C_SLURM_*`` variables (and ``SLURM_CONF``),
else a throw-away one started with ``scripts/slurm-up.sh`` for this run. Measured, in one run:

- a trivial job (``python -c "print('hi')"``): submit → first log line, and submit → finished,
  with ``SlurmScheduler`` (slurmrestd, output file followed from a byte offset) and with the
  command line (``sbatch --parsable`` then ``tail -F`` on the output file; ``sbatch --wait`` for
  the end);
- log latency: a job prints a timestamp every 10 ms; each line's delay from ``print`` in the job
  to the line arriving from ``follow_logs``, next to ``tail -F`` on a job's output file.

Run: ``python benchmarks/bench_slurm_scheduler.py [--jobs 5] [--lines 200]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from j2c_server.config import J2CSettings
from j2c_server.models import JobStatus
from j2c_server.schedulers.base import JobSpec
from j2c_server.schedulers.slurm import SlurmScheduler

REPO = Path(__file__).resolve().parents[1]
TRIVIAL = [sys.executable, "-c", "print('hi')"]
RUN = str(os.getpid())


def stamping(lines: int) -> list[str]:
    code = f"import time\nfor _ in range({lines}):\n    print(time.time(), flush=True)\n"
    return [sys.executable, "-c", code + "    time.sleep(0.01)\n"]


@contextmanager
def slurm() -> Iterator[dict[str, str]]:
    """The ``J2C_SLURM_*`` / ``SLURM_CONF`` values of a running Slurm."""
    if os.environ.get("J2C_SLURM_URL"):
        yield dict(os.environ)
        return
    folder = tempfile.mkdtemp(prefix="j2c-slurm-bench-")
    up = subprocess.run(
        [REPO / "scripts" / "slurm-up.sh", folder], capture_output=True, text=True, check=True
    )
    try:
        yield dict(line.removeprefix("export ").split("=", 1) for line in up.stdout.splitlines())
    finally:
        subprocess.run([REPO / "scripts" / "slurm-down.sh", folder], check=False)
        shutil.rmtree(folder, ignore_errors=True)


def scheduler_for(env: dict[str, str]) -> SlurmScheduler:
    slurm = {
        "url": env["J2C_SLURM_URL"],
        "user": env.get("J2C_SLURM_USER"),
        "token_file": env["J2C_SLURM_TOKEN_FILE"],
        "job_dir": env["J2C_SLURM_JOB_DIR"],
    }
    return SlurmScheduler(J2CSettings.model_validate({"scheduler": {"slurm": slurm}}))


async def ours_trivial(scheduler: SlurmScheduler, index: int) -> tuple[float, float]:
    job_id = f"bench-{RUN}-{index}"
    start = time.perf_counter()
    handle = await scheduler.submit(
        JobSpec(key=job_id, job_id=job_id, name="bench", command=TRIVIAL)
    )
    first = None
    async for _line in scheduler.follow_logs(handle):
        first = first or time.perf_counter() - start
    state = await scheduler.status(handle)
    assert state.status == JobStatus.succeeded, state
    return first or float("nan"), time.perf_counter() - start


def sbatch(env: dict[str, str], command: list[str], output: Path, *extra: str) -> str:
    return subprocess.run(
        ["sbatch", "--parsable", *extra, f"--output={output}", "--wrap", shlex.join(command)],
        env={**os.environ, "SLURM_CONF": env["SLURM_CONF"]},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def cli_trivial(env: dict[str, str], folder: Path, index: int) -> tuple[float, float]:
    output = folder / f"cli-{index}.out"
    output.touch()
    start = time.perf_counter()
    with subprocess.Popen(
        ["tail", "-F", "-n", "+1", str(output)], stdout=subprocess.PIPE, text=True
    ) as tail:
        assert tail.stdout is not None
        sbatch(env, TRIVIAL, output)
        tail.stdout.readline()
        first = time.perf_counter() - start
        tail.terminate()
    start = time.perf_counter()
    sbatch(env, TRIVIAL, folder / f"cli-wait-{index}.out", "--wait")
    return first, time.perf_counter() - start


async def ours_latency(scheduler: SlurmScheduler, lines: int) -> list[float]:
    job_id = f"bench-{RUN}-latency"
    handle = await scheduler.submit(
        JobSpec(key=job_id, job_id=job_id, name="latency", command=stamping(lines))
    )
    return [time.time() - float(line.text) async for line in scheduler.follow_logs(handle)]


def tail_latency(env: dict[str, str], folder: Path, lines: int) -> list[float]:
    output = folder / "tail.out"
    output.touch()
    with subprocess.Popen(
        ["tail", "-F", "-n", "+1", str(output)], stdout=subprocess.PIPE, text=True
    ) as tail:
        assert tail.stdout is not None
        sbatch(env, stamping(lines), output)
        delays = []
        for _ in range(lines):
            stamp = float(tail.stdout.readline())  # read first, then look at the clock
            delays.append(time.time() - stamp)
        tail.terminate()
    return delays


def percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def row(what: str, ours: float, peer: float, peer_name: str) -> str:
    return (
        f"| {what} | {ours * 1000:8.1f} | {peer * 1000:8.1f} | {peer_name} | {ours / peer:6.2f}x |"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5)
    parser.add_argument("--lines", type=int, default=200)
    args = parser.parse_args()
    with slurm() as env, tempfile.TemporaryDirectory(dir=env["J2C_SLURM_JOB_DIR"]) as tmp:
        folder = Path(tmp)
        scheduler = scheduler_for(env)
        try:
            ours = [await ours_trivial(scheduler, i) for i in range(args.jobs)]
            cli = [cli_trivial(env, folder, i) for i in range(args.jobs)]
            latency = await ours_latency(scheduler, args.lines)
            tail = tail_latency(env, folder, args.lines)
        finally:
            await scheduler.close()

    median = statistics.median
    print(f"slurm backend, {args.jobs} trivial jobs, {args.lines} timestamped lines (ms)\n")
    print("| what | j2c slurm | peer | peer is | ratio |")
    print("|---|---|---|---|---|")
    print(
        row(
            "trivial job: submit → first line (median)",
            median(o[0] for o in ours),
            median(c[0] for c in cli),
            "sbatch + tail -F",
        )
    )
    print(
        row(
            "trivial job: submit → finished (median)",
            median(o[1] for o in ours),
            median(c[1] for c in cli),
            "sbatch --wait",
        )
    )
    for q in (50, 95, 99):
        print(row(f"print → line, p{q}", percentile(latency, q), percentile(tail, q), "tail -F"))


if __name__ == "__main__":
    asyncio.run(main())
