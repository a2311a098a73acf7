"""Layer-cache benchmark: j2c-unpack cold vs warm (``--cache-dir``) to the first line of user code.

Inputs: the pack benchmark's project and ~400 MB / 12.7k-file venv (``benchmarks/inputs.py``),
with one extra file, ``first.py`` (``print("FIRST LINE")``), as the entry point, so a run's wall
time is j2c-unpack's whole start-up up to the first line of user code (plus that print). The
layers are packed once and published to a ``file://`` store under ``.bench/unpack-cache-run/``.
In interleaved rounds, each into fresh folders on one filesystem:

- **cold**: an empty cache: download, verify, extract into the cache, relocate, materialise,
  prove the venv runs, run ``first.py``;
- **warm**: the same job again with the cache filled: fingerprint checks, the code copied, the
  venv used in place, proved to run, ``first.py`` run;
- **no cache**: j2c-unpack without ``--cache-dir`` (what every job paid before);
- ``zstd -dc | tar -x`` of the same two blobs (no copy, digest, checks or run).

Targets: warm <= 1.5 s and cold / warm >= 10x. Best rounds are reported (the machine may be
shared), medians beside them.

Run: ``python benchmarks/unpack_cache.py [--rounds 2] [--dir DIR]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from inputs import BENCH_DIR, bench_project, bench_venv
from unpack import J2C_UNPACK, Published, Run, measure, zstd_tar

FIRST = 'print("FIRST LINE", flush=True)\n'


def publish_inputs(work: Path) -> Published:
    from j2c_server.pack import PackSpec, make_manifest, pack, publish
    from j2c_server.storage import open_store

    project = work / "project"
    if not (project / "first.py").exists():
        shutil.rmtree(project, ignore_errors=True)
        shutil.copytree(bench_project(), project, symlinks=True)
        (project / "first.py").write_text(FIRST)
    spec = PackSpec(code_path=project, call_path="first.py", venv_path=bench_venv())
    result = pack(spec, work / "pack-cache")
    store = work / "store"
    published = asyncio.run(publish(open_store(store.as_uri()), result, make_manifest(result)))
    return Published(
        published.manifest_uri,
        [packed.path for packed in result.layers],
        sum(packed.layer.unpacked_size for packed in result.layers),
        sum(packed.layer.files for packed in result.layers),
    )


def j2c_unpack(inputs: Published, workdir: Path, cache: Path | None) -> Run:
    command = [str(J2C_UNPACK), inputs.manifest_uri, "--workdir", str(workdir)]
    command += ["--paths", "relocate"]
    if cache is not None:
        command += ["--cache-dir", str(cache)]
    run, stderr = measure(command)
    if "FIRST LINE" in stderr:
        raise SystemExit("unexpected: user output on stderr")
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
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
        f"{args.rounds} interleaved rounds (warm: 2 per round)\n"
    )
    runs: dict[str, list[Run]] = {"cold": [], "warm": [], "no cache": [], "zstd -dc | tar -x": []}
    for _ in range(args.rounds):
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
        os.sync()
        cache = scratch / "cache"
        runs["cold"].append(j2c_unpack(inputs, scratch / "w-cold", cache))
        os.sync()
        for number in range(2):
            runs["warm"].append(j2c_unpack(inputs, scratch / f"w-warm-{number}", cache))
        os.sync()
        runs["no cache"].append(j2c_unpack(inputs, scratch / "w-plain", None))
        tar = scratch / "tar"
        tar.mkdir()
        os.sync()
        runs["zstd -dc | tar -x"].append(zstd_tar(inputs, tar))
    shutil.rmtree(scratch, ignore_errors=True)

    best = {name: min(r.seconds for r in rs) for name, rs in runs.items()}
    print(f"{'run':<22}{'best s':>8}{'median s':>10}{'CPU s':>8}")
    for name, rs in runs.items():
        median = statistics.median(r.seconds for r in rs)
        cpu = min(r.cpu_seconds for r in rs)
        print(f"{name:<22}{best[name]:>8.2f}{median:>10.2f}{cpu:>8.2f}")
    print("\ntargets (best rounds, to the first line of user code):")
    print(f"  warm start            = {best['warm']:5.2f} s   (target <= 1.5 s)")
    print(f"  cold / warm           = {best['cold'] / best['warm']:5.1f}x   (target >= 10x)")
    print(f"  no cache / warm       = {best['no cache'] / best['warm']:5.1f}x")
    print(f"  warm / zstd|tar       = {best['warm'] / best['zstd -dc | tar -x']:5.2f}x")


if __name__ == "__main__":
    main()
