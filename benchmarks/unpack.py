"""Unpack benchmark: j2c-unpack against ``zstd -dc | tar -x`` on the pack benchmark's layers.

Inputs: the benchmark project and ~400 MB venv (``benchmarks/inputs.py``), packed once with
j2c's packer and published to a ``file://`` store under ``.bench/unpack-run/``. Then, in
interleaved rounds, each into a fresh folder on the same filesystem:

- **j2c-unpack --no-run**: a fresh process doing everything a job does before its entry point
  starts: read the manifest, download both layers (copy + sha256), verify, extract them safely,
  relocate the venv and check that it runs. Its own log gives each stage's seconds;
  *download+extract* is the downloading and extracting stages together;
- **j2c extract_layer()**: the extraction function alone on the same two blobs, timed inside a
  fresh process (wall and CPU seconds of the call, all threads), without start-up or download;
- ``zstd -dc | tar -x`` of the same two blobs (no copy, no digest, no checks);
- Python's ``tarfile`` (``extractall``, filter "tar") over ``zstandard``: what a plain Python
  unpacker does.

Medians of the rounds give the ratios, with the number of rounds (the best round is printed,
never used for a ratio), and median CPU seconds (user + sys, children included) give them
independently of other load. Target: the whole ``j2c-unpack --no-run`` process <= 1.3x the whole
``zstd -dc | tar -x`` process (like for like: each from its start to its exit). j2c's own
download+extract stages and ``extract_layer()`` alone are printed beside it, labelled as what
they are: parts of j2c against tar's whole process.

Run: ``python benchmarks/unpack.py [--rounds 3] [--dir DIR]``; ``--dir /dev/shm/...`` measures
on tmpfs, where the filesystem's own noise (journal, discards) does not drown the tools' cost.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from inputs import BENCH_DIR, bench_project, bench_venv

J2C_UNPACK = Path(sys.executable).parent / "j2c-unpack"
STAGE_DONE = re.compile(r"^j2c: (\w+): .* in ([0-9.]+) s$")
EXTRACT = """
import sys, time
from pathlib import Path
from j2c_server.unpack.extract import extract_layer
wall, cpu = time.perf_counter(), time.process_time()
for number, blob in enumerate(sys.argv[2:]):
    extract_layer(Path(blob), Path(sys.argv[1]) / str(number), venv=True)
print(time.perf_counter() - wall, time.process_time() - cpu, file=sys.stderr)
"""
TARFILE = """
import sys, tarfile, zstandard
for blob, dest in zip(sys.argv[1::2], sys.argv[2::2]):
    with open(blob, "rb") as f, tarfile.open(
        fileobj=zstandard.ZstdDecompressor().stream_reader(f), mode="r|"
    ) as archive:
        archive.extractall(dest, filter="tar")
"""


@dataclass
class Run:
    seconds: float
    cpu_seconds: float
    stages: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Published:
    manifest_uri: str
    blobs: list[Path]
    unpacked_bytes: int
    files: int


def measure(command: list[str] | str) -> tuple[Run, str]:
    """Wall and CPU seconds (the command and its children) of one command, and its stderr."""
    started = time.perf_counter()
    process = subprocess.Popen(
        command, shell=isinstance(command, str), stderr=subprocess.PIPE, text=True
    )
    assert process.stderr is not None
    stderr = process.stderr.read()
    _pid, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {command}\n{stderr}")
    return Run(seconds, usage.ru_utime + usage.ru_stime), stderr


def publish_inputs(work: Path) -> Published:
    from j2c_server.pack import PackSpec, make_manifest, pack, publish
    from j2c_server.storage import open_store

    spec = PackSpec(code_path=bench_project(), call_path="train.py", venv_path=bench_venv())
    result = pack(spec, work / "cache")
    store = work / "store"
    published = asyncio.run(publish(open_store(store.as_uri()), result, make_manifest(result)))
    return Published(
        published.manifest_uri,
        [packed.path for packed in result.layers],
        sum(packed.layer.unpacked_size for packed in result.layers),
        sum(packed.layer.files for packed in result.layers),
    )


def j2c_unpack(inputs: Published, dest: Path) -> Run:
    command = [str(J2C_UNPACK), inputs.manifest_uri, "--workdir", str(dest)]
    run, stderr = measure([*command, "--paths", "relocate", "--no-run"])
    for line in stderr.splitlines():
        if match := STAGE_DONE.match(line):
            run.stages[match[1]] = float(match[2])
    return run


def j2c_extract(inputs: Published, dest: Path) -> Run:
    _, stderr = measure([sys.executable, "-c", EXTRACT, str(dest), *map(str, inputs.blobs)])
    wall, cpu = map(float, stderr.split())
    return Run(wall, cpu)


def zstd_tar(inputs: Published, dest: Path) -> Run:
    commands = []
    for number, blob in enumerate(inputs.blobs):
        (dest / str(number)).mkdir(parents=True)
        commands.append(f"zstd -dc '{blob}' | tar -x -C '{dest / str(number)}'")
    return measure(" && ".join(commands))[0]


def python_tarfile(inputs: Published, dest: Path) -> Run:
    pairs = [str(x) for n, blob in enumerate(inputs.blobs) for x in (blob, dest / str(n))]
    return measure([sys.executable, "-c", TARFILE, *pairs])[0]


OURS = "j2c-unpack --no-run"
EXTRACT_ONLY = "j2c extract_layer()"
TOOLS: dict[str, Callable[[Published, Path], Run]] = {
    OURS: j2c_unpack,
    EXTRACT_ONLY: j2c_extract,
    "zstd -dc | tar -x": zstd_tar,
    "python tarfile + zstandard": python_tarfile,
}
BASELINE = "zstd -dc | tar -x"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", type=Path, help="where to extract (default: .bench/unpack-run)")
    args = parser.parse_args()
    work = BENCH_DIR / "unpack-run"
    inputs = publish_inputs(work)
    scratch = (args.dir or work / "out").resolve()
    compressed = sum(blob.stat().st_size for blob in inputs.blobs)
    print(
        f"layers: {inputs.files} files, {inputs.unpacked_bytes / 1e6:.0f} MB unpacked, "
        f"{compressed / 1e6:.0f} MB compressed; extracting into {scratch}; "
        f"{os.cpu_count()} CPUs; {args.rounds} interleaved rounds\n"
    )

    runs: dict[str, list[Run]] = {name: [] for name in TOOLS}
    for _ in range(args.rounds):
        for name, tool in TOOLS.items():
            shutil.rmtree(scratch, ignore_errors=True)
            scratch.mkdir(parents=True)
            os.sync()  # the previous round's writes must not be flushed during this one
            runs[name].append(tool(inputs, scratch))
    shutil.rmtree(scratch, ignore_errors=True)

    median = {name: statistics.median(r.seconds for r in rs) for name, rs in runs.items()}
    cpu = {name: statistics.median(r.cpu_seconds for r in rs) for name, rs in runs.items()}
    base = median[BASELINE]
    print(f"{'tool':<28}{'n':>3}{'median s':>10}{'best s':>8}{'MB/s':>7}{'vs tar':>8}{'CPU s':>7}")
    for name, rs in runs.items():
        print(
            f"{name:<28}{len(rs):>3}{median[name]:>10.2f}{min(r.seconds for r in rs):>8.2f}"
            f"{inputs.unpacked_bytes / 1e6 / median[name]:>7.0f}{median[name] / base:>7.2f}x"
            f"{cpu[name]:>7.2f}"
        )

    stages = ("downloading", "extracting", "relocating")
    ours = runs[OURS]
    print(f"\nj2c-unpack's stages, medians of {len(ours)} rounds (its own log):")
    for stage in stages:
        print(f"  {stage:<12}{statistics.median(r.stages.get(stage, 0.0) for r in ours):>6.2f} s")
    rest = statistics.median(
        r.seconds - sum(r.stages.get(stage, 0.0) for stage in stages) for r in ours
    )
    print(f"  {'the rest':<12}{rest:>6.2f} s  (start-up, imports, manifest)")
    download_extract = statistics.median(
        r.stages["downloading"] + r.stages["extracting"] for r in ours
    )

    print(f"\ntargets (medians of {len(ours)} rounds):")
    print(
        f"  whole j2c-unpack --no-run / whole zstd|tar = {median[OURS] / base:5.2f}x   "
        "(target <= 1.3; each process from start to exit)"
    )
    print(
        f"  j2c's download+extract stages / whole zstd|tar = {download_extract / base:5.2f}x "
        "(a part of j2c: no start-up, no manifest)"
    )
    print(
        f"  extract_layer() alone / whole zstd|tar = {median[EXTRACT_ONLY] / base:5.2f}x "
        "(a part of j2c)"
    )
    print(
        f"  CPU seconds: extract_layer() / zstd|tar = {cpu[EXTRACT_ONLY] / cpu[BASELINE]:5.2f}x, "
        f"whole command / zstd|tar = {cpu[OURS] / cpu[BASELINE]:.2f}x"
    )


if __name__ == "__main__":
    main()
