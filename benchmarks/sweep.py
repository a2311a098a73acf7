"""A sweep of N variants as one send, next to N separate sends of the same variants.

Through ``JobService`` (the server's own service, in-process) on the local backend or, with
``--backend slurm``, the real Slurm named by exported ``J2C_SCHEDULER__SLURM__*`` settings
(``eval "$(scripts/slurm-up.sh DIR)"``), for N = 6 and 64 by default; both sides ship the
benchmark project with its ~400 MB ``--system-site-packages`` venv (``inputs.py``):

- **sweep**: one ``submit`` of the project with ``sweep: {grid: {i: [0..N-1]}}``;
- **separate**: N ``submit`` calls one after another, each with its own ``--i`` argument, as a
  script looping over ``j2c submit`` (or the REST API) does.

Measured per side: seconds from the first call until every variant is ``submitted`` (its
scheduler handle recorded), how many scans of the project and venv ran, bytes uploaded, and
scheduler jobs created (on Slurm: one array vs N jobs). Each side gets a fresh one-line edit of
``train.py`` first, so neither reuses the other's code layer; the venv layer is packed once
before the first round (both sides reuse it, as every send after the first does). Rounds
interleave the two sides; medians are printed. Once a side is all submitted it is cancelled:
what is measured is the send, not the jobs.

Run: ``python benchmarks/sweep.py [--sizes 6,64] [--rounds 3] [--backend local|slurm]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from inputs import bench_project, bench_venv

from j2c_server.config import load_settings
from j2c_server.jobs.service import JobService
from j2c_server.sweeps.hook import job_service
from j2c_server.wire.api import JobRecord, JobRequest, Stage, StageState
from j2c_server.wire.sweep import SweepSpec

TRAIN = "import sys, time\nprint('variant', sys.argv[1:], flush=True)\ntime.sleep(30)\n"


@dataclass
class Side:
    seconds: float
    scans: int
    bytes_uploaded: int
    scheduler_jobs: int


def _edit(project: Path, tag: str) -> None:
    (project / "train.py").write_text(f"# {tag}\n{TRAIN}")


def _request(project: Path, venv: Path, backend: str, **extra: object) -> JobRequest:
    return JobRequest.model_validate(
        {
            "code_path": str(project),
            "call_path": "train.py",
            "venv_path": str(venv),
            "scheduler": backend,
            **extra,
        }
    )


def _scanned(record: JobRecord) -> int:
    stage = record.stages.get(Stage.scan)
    return int(stage is not None and stage.state == StageState.finished)


def _uploaded(record: JobRecord) -> int:
    stage = record.stages.get(Stage.upload)
    return int(stage.output.get("bytes_uploaded", 0)) if stage is not None else 0


async def _all_submitted(service: JobService, ids: list[str]) -> list[JobRecord]:
    while True:
        records = [await service.get(job_id) for job_id in ids]
        if all(r.handle is not None or r.status.terminal for r in records):
            return records
        await asyncio.sleep(0.05)


async def sweep_side(service: JobService, project: Path, venv: Path, n: int, be: str) -> Side:
    grid = {"i": [str(i) for i in range(n)]}
    request = _request(project, venv, be, args=["--i", "{i}"], sweep=SweepSpec(grid=grid))
    start = time.perf_counter()
    parent = await service.submit(request)
    assert parent.sweep is not None
    children = await _all_submitted(service, parent.sweep.children)
    seconds = time.perf_counter() - start
    parent = await service.get(parent.id)
    arrays = {c.handle.data.get("array", c.handle.id) for c in children if c.handle is not None}
    await service.cancel(parent.id)
    return Side(seconds, _scanned(parent), _uploaded(parent), len(arrays))


async def separate_side(service: JobService, project: Path, venv: Path, n: int, be: str) -> Side:
    start = time.perf_counter()
    ids = [
        (await service.submit(_request(project, venv, be, args=["--i", str(i)]))).id
        for i in range(n)
    ]
    records = await _all_submitted(service, ids)
    seconds = time.perf_counter() - start
    for job_id in ids:
        await service.cancel(job_id)
    return Side(
        seconds,
        sum(_scanned(r) for r in records),
        sum(_uploaded(r) for r in records),
        len({r.handle.id for r in records if r.handle is not None}),
    )


async def _settle(service: JobService) -> None:
    """Every job ended (cancelled) before the next side starts."""
    async with asyncio.timeout(300):
        for record in await service.list_jobs():
            await service.wait(record.id)


async def run(args: argparse.Namespace) -> None:
    venv, source = bench_venv(), bench_project()
    work = Path(tempfile.mkdtemp(prefix="j2c-sweep-bench-"))
    project = work / "project"
    shutil.copytree(source, project)
    os.environ["J2C_DATA_DIR"] = str(work / "data")
    # The front ends' service, sweeps included (a bare JobService refuses a sweep).
    service = job_service(load_settings())
    service.start()
    results: dict[tuple[int, str], list[Side]] = {}
    try:
        _edit(project, "warm-up")  # packs the venv layer once, for both sides alike
        warm = await service.submit(_request(project, venv, args.backend))
        await _all_submitted(service, [warm.id])
        await service.cancel(warm.id)
        await _settle(service)
        for round_no in range(args.rounds):
            for n in args.sizes:
                order = ["sweep", "separate"] if round_no % 2 == 0 else ["separate", "sweep"]
                for side in order:
                    _edit(project, f"{side}-{n}-{round_no}-{time.time()}")
                    measure = sweep_side if side == "sweep" else separate_side
                    got = await measure(service, project, venv, n, args.backend)
                    results.setdefault((n, side), []).append(got)
                    await _settle(service)
                    print(f"  round {round_no + 1} N={n} {side}: {got}", flush=True)
    finally:
        await service.stop()
        shutil.rmtree(work, ignore_errors=True)
    _table(results, args)


def _table(results: dict[tuple[int, str], list[Side]], args: argparse.Namespace) -> None:
    print(
        f"\nsend → all N submitted, {args.backend} backend, median of {args.rounds} "
        "interleaved rounds\n"
    )
    print("| N | measure | sweep (one send) | N separate sends | ratio |")
    print("|---|---|---|---|---|")
    for n in args.sizes:
        sweep, separate = results[(n, "sweep")], results[(n, "separate")]

        def med(sides: list[Side], field: str) -> float:
            return statistics.median(getattr(side, field) for side in sides)

        s, p = med(sweep, "seconds"), med(separate, "seconds")
        print(f"| {n} | seconds | {s:.2f} | {p:.2f} | {p / s:.1f}x faster |")
        print(f"| {n} | scans | {med(sweep, 'scans'):.0f} | {med(separate, 'scans'):.0f} | |")
        bs, bp = med(sweep, "bytes_uploaded"), med(separate, "bytes_uploaded")
        print(f"| {n} | bytes uploaded | {bs:,.0f} | {bp:,.0f} | |")
        js, jp = med(sweep, "scheduler_jobs"), med(separate, "scheduler_jobs")
        print(f"| {n} | scheduler jobs | {js:.0f} | {jp:.0f} | |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", default="6,64", help="comma-separated N (default 6,64)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backend", choices=["local", "slurm"], default="local")
    args = parser.parse_args()
    args.sizes = [int(n) for n in args.sizes.split(",")]
    if args.backend == "slurm" and not os.environ.get("J2C_SCHEDULER__SLURM__URL"):
        parser.error('--backend slurm needs a Slurm: eval "$(scripts/slurm-up.sh DIR)" first')
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
