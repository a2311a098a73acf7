"""The node layer cache through the Slurm backend: submit -> first line of user code, cold vs
warm, with the default placement (``original``) and with ``relocate``, on a real Slurm.

The same measure as ``container_cache.py`` (its project, its venv, its timing from
``SlurmScheduler.submit`` to the job's ``FIRST LINE`` through slurmrestd and the output file),
with ``scheduler.slurm.cache_dir`` a fresh folder per round and placement: the first job of the
manifest is cold, the second warm. Medians of the interleaved rounds, best beside them.

Run: ``eval "$(scripts/slurm-up.sh DIR)"; python benchmarks/slurm_cache.py [--rounds 3]
[--venv DIR]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from container_cache import _publish, cold_warm_table, first_line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--venv", type=Path)
    options = parser.parse_args()
    if not os.environ.get("J2C_SCHEDULER__SLURM__URL"):
        raise SystemExit('start a Slurm first: eval "$(scripts/slurm-up.sh DIR)"')
    from j2c_server.config import load_settings
    from j2c_server.schedulers.slurm.backend import SlurmScheduler

    work = Path(tempfile.mkdtemp(prefix="j2c-bench-slurm-cache-"))
    venv = work / "venv"  # a copy (hard links) of --venv: moved away below
    if options.venv is not None:
        subprocess.run(["cp", "-al", str(options.venv), str(venv)], check=True)
    else:
        subprocess.run(
            [sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True
        )
    try:
        data = work / "data"
        manifest = _publish(work, venv, data / "store")
        # The jobs run on this machine: the packed paths must be absent, as on a compute node, or
        # --paths original would fall back to relocating.
        for packed in (work / "project", venv):
            packed.rename(packed.with_name(packed.name + "-away"))
        samples: dict[tuple[str, str], list[float]] = {}
        for round_ in range(options.rounds):
            for placement in ("original", "relocate"):
                settings = load_settings(
                    overrides={
                        "data_dir": str(data),
                        "storage": {"url": (data / "store").as_uri(), "shared": True},
                        "scheduler": {
                            "slurm": {"cache_dir": str(work / f"cache-{placement}-{round_}")}
                        },
                    },
                )
                for kind in ("cold", "warm"):
                    seconds, line = asyncio.run(
                        first_line(SlurmScheduler(settings), None, manifest, placement)
                    )
                    samples.setdefault((placement, kind), []).append(seconds)
                    print(f"round {round_ + 1} {placement:8} {kind}: {seconds:.2f} s  {line}")
    finally:
        shutil.rmtree(work, ignore_errors=True)  # the venv copy and a cache per round
    cold_warm_table(samples)


if __name__ == "__main__":
    main()
