"""Layer-cache benchmark: j2c-unpack cold vs warm (``--cache-dir``) to the first line of user code.

Inputs: the pack benchmark's project and ~400 MB / 12.7k-file venv (``benchmarks/inputs.py``),
with one extra file, ``first.py`` (``print("FIRST LINE")``), as the entry point, so a run's wall
time is j2c-unpack's whole start-up up to the first line of user code (plus that print). The
layers are packed once and published to a ``file://`` store under ``.bench/unpack-cache-run/``.
In interleaved rounds, each into fresh folders on one filesystem:

- **cold**: an empty cache: download, verify, extract into the cache, relocate, materialise,
  prove the venv runs, run ``first.py``;
- **warm**: the same job again with the cache filled: fingerprint checks, the code copied, the
  venv linked into its original path (``--paths original``, the default) or used in place
  (``relocate``), proved to run, ``first.py`` run;
- **no cache**: j2c-unpack without ``--cache-dir`` (what every job paid before).

Each for both placements, one sample of each kind per round (the same number on every side; a
warm start extracts nothing, so it is compared with cold starts, not with ``zstd | tar``: that
is ``unpack.py``'s). Targets: warm <= 1.5 s and cold / warm >= 10x, on the medians.

Run: ``python benchmarks/unpack_cache.py [--rounds 3] [--dir DIR]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from inputs import BENCH_DIR, bench_project, bench_venv
from unpack import J2C_UNPACK, Published, Run, measure

FIRST = 'print("FIRST LINE", flush=True)\n'


def publish_inputs(work: Path) -> Published:
    """Packs the project and a hard-linked copy of the venv from ``work/src`` (the packed
    paths), which the measurement then moves away: ``--paths original`` restores them where
    nothing is, as on a compute node, instead of falling back to relocating."""
    from j2c_server.pack import PackSpec, make_manifest, pack, publish
    from j2c_server.storage import open_store

    src = work / "src"
    project, venv = src / "project", src / "venv"
    if not (project / "first.py").exists():
        shutil.rmtree(src, ignore_errors=True)
        src.mkdir(parents=True)
        shutil.copytree(bench_project(), project, symlinks=True)
        (project / "first.py").write_text(FIRST)
        subprocess.run(["cp", "-al", str(bench_venv()), str(venv)], check=True)
    spec = PackSpec(code_path=project, call_path="first.py", venv_path=venv)
    result = pack(spec, work / "pack-cache")
    store = work / "store"
    published = asyncio.run(publish(open_store(store.as_uri()), result, make_manifest(result)))
    return Published(
        published.manifest_uri,
        [packed.path for packed in result.layers],
        sum(packed.layer.unpacked_size for packed in result.layers),
        sum(packed.layer.files for packed in result.layers),
    )


@contextlib.contextmanager
def packed_paths_away(work: Path) -> Iterator[None]:
    """The packed paths absent while jobs run (put back after, for the next run's pack)."""
    (work / "src").rename(work / "src-away")
    try:
        yield
    finally:
        (work / "src-away").rename(work / "src")


PLACEMENTS = ("original", "relocate")


def j2c_unpack(inputs: Published, workdir: Path, cache: Path | None, placement: str) -> Run:
    command = [str(J2C_UNPACK), inputs.manifest_uri, "--workdir", str(workdir)]
    command += ["--paths", placement]
    if cache is not None:
        command += ["--cache-dir", str(cache)]
    run, stderr = measure(command)
    if "FIRST LINE" in stderr:
        raise SystemExit("unexpected: user output on stderr")
    if placement == "original" and "relocating under" in stderr:
        raise SystemExit("--paths original fell back to relocating: " + stderr[-500:])
    return run


Runs = dict[tuple[str, str], list[Run]]


def _measure(args: argparse.Namespace, inputs: Published, scratch: Path, runs: Runs) -> None:
    for _ in range(args.rounds):
        for placement in PLACEMENTS:
            shutil.rmtree(scratch, ignore_errors=True)
            scratch.mkdir(parents=True)
            cache = scratch / "cache"
            for kind, folder, used in (
                ("cold", "w-cold", cache),
                ("warm", "w-warm", cache),
                ("no cache", "w-plain", None),
            ):
                os.sync()
                run = j2c_unpack(inputs, scratch / folder, used, placement)
                runs.setdefault((placement, kind), []).append(run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--dir", type=Path, help="scratch folder (default: .bench/unpack-cache-run)"
    )
    args = parser.parse_args()
    work = BENCH_DIR / "unpack-cache-run"
    inputs = publish_inputs(work)
    scratch = (args.dir or work / "out").resolve()
    compressed = sum(blob.stat().st_size for blob in inputs.blobs)
    print(
        f"layers: {inputs.files} files, {inputs.unpacked_bytes / 1e6:.0f} MB unpacked, "
        f"{compressed / 1e6:.0f} MB compressed; scratch {scratch}; {os.cpu_count()} CPUs; "
        f"{args.rounds} interleaved rounds, one sample of each kind per round\n"
    )
    runs: Runs = {}
    with packed_paths_away(work):
        _measure(args, inputs, scratch, runs)
    shutil.rmtree(scratch, ignore_errors=True)

    median = {key: statistics.median(r.seconds for r in rs) for key, rs in runs.items()}
    print(f"{'placement':<10}{'run':<10}{'median s':>10}{'best s':>8}{'CPU s':>8}")
    for (placement, kind), rs in runs.items():
        best, cpu = min(r.seconds for r in rs), min(r.cpu_seconds for r in rs)
        print(f"{placement:<10}{kind:<10}{median[(placement, kind)]:>10.2f}{best:>8.2f}{cpu:>8.2f}")
    print("\ntargets (medians, to the first line of user code):")
    for placement in PLACEMENTS:
        warm = median[(placement, "warm")]
        print(
            f"  {placement:<9} warm {warm:5.2f} s (target <= 1.5 s); cold / warm "
            f"{median[(placement, 'cold')] / warm:5.1f}x (target >= 10x); no cache / warm "
            f"{median[(placement, 'no cache')] / warm:5.1f}x"
        )


if __name__ == "__main__":
    main()
