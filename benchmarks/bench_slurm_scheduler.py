"""Slurm backend: job start-up and log latency, next to what a Slurm user does by hand.

Against a real Slurm: the one named by exported ``J2C_SCHEDULER__SLURM__*`` settings (and
``SLURM_CONF``), else a throw-away one started with ``scripts/slurm-up.sh`` for this run.
Measured, in one run:

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
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from j2c_server.config import J2CSettings
from j2c_server.schedulers.slurm.backend import SlurmScheduler

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

REPO = Path(__file__).resolve().parents[1]
RUN = str(os.getpid())
SETTING = "J2C_SCHEDULER__SLURM__"  # what scripts/slurm-up.sh exports


@contextmanager
def slurm() -> Iterator[dict[str, str]]:
    """The ``J2C_SCHEDULER__SLURM__*`` / ``SLURM_CONF`` values of a running Slurm."""
    if os.environ.get("J2C_SCHEDULER__SLURM__URL"):
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
        "url": env["J2C_SCHEDULER__SLURM__URL"],
        "user": env.get("J2C_SCHEDULER__SLURM__USER"),
        "token_file": env["J2C_SCHEDULER__SLURM__TOKEN_FILE"],
        "job_dir": env["J2C_SCHEDULER__SLURM__JOB_DIR"],
    }
    return SlurmScheduler(J2CSettings.model_validate({"scheduler": {"slurm": slurm}}))


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
    start = time.perf_counter()
    with common.tail_f(output) as tail:
        assert tail.stdout is not None
        sbatch(env, common.TRIVIAL, output)
        tail.stdout.readline()
        first = time.perf_counter() - start
        tail.terminate()
    start = time.perf_counter()
    sbatch(env, common.TRIVIAL, folder / f"cli-wait-{index}.out", "--wait")
    return first, time.perf_counter() - start


def tail_latency(env: dict[str, str], folder: Path, lines: int) -> list[float]:
    output = folder / "tail.out"
    with common.tail_f(output) as tail:
        assert tail.stdout is not None
        sbatch(env, common.stamping(lines), output)
        delays = common.read_delays(tail.stdout, lines)
        tail.terminate()
    return delays


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5)
    parser.add_argument("--lines", type=int, default=200)
    args = parser.parse_args()
    with slurm() as env, tempfile.TemporaryDirectory(dir=env[f"{SETTING}JOB_DIR"]) as tmp:
        folder = Path(tmp)
        scheduler = scheduler_for(env)
        try:
            ours = [
                await common.trivial_timings(scheduler, f"bench-{RUN}-{i}")
                for i in range(args.jobs)
            ]
            cli = [cli_trivial(env, folder, i) for i in range(args.jobs)]
            latency = await common.log_delays(scheduler, f"bench-{RUN}-latency", args.lines)
            tail = tail_latency(env, folder, args.lines)
        finally:
            await scheduler.close()

    common.print_table(
        f"slurm backend, {args.jobs} trivial jobs, {args.lines} timestamped lines",
        "j2c slurm",
        [
            *common.startup_rows(ours, cli, "sbatch + tail -F", "sbatch --wait"),
            *common.latency_rows(latency, tail, "tail -F"),
        ],
    )


if __name__ == "__main__":
    asyncio.run(main())
