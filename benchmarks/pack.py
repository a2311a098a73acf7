"""Packing benchmark: j2c against the tools a user would otherwise pack a venv with.

On the same ~400 MB venv (``benchmarks/inputs.py``), in interleaved rounds, all cold:

- **j2c pack stage**: a fresh Python process running ``pack()`` on the benchmark project + venv
  (validate, scan, write both layers), what the pipeline's pack stage does;
- **j2c build (+ publish)**: the whole ``j2c build --json`` command into a fresh data dir, which
  also copies the layers into the embedded ``file://`` store;
- ``venv-pack`` (gzip, one thread), ``tar | zstd -T0 -3``, ``tar | gzip``;
- a raw read of the same files (the limit: no tool can be faster than reading its input).

Then the resubmit case: one line appended to a code file, ``j2c build`` again on the warm data
dir: seconds and bytes written, venv layer reused or not.

Then the big-file case (``--big-file`` runs it alone): the benchmark project (code, a 2.6 MB
CSV, 2 MB of weights) plus a 200 MB data file of random bytes, sent through a real Jupyter
server (local scheduler, ``file://`` store), then again after one-line edits: bytes uploaded and
seconds from the POST to ``submitted``, with big files as their own blobs (``pack.big_file_mb``,
default 1), without (``big_file_mb: 0`` and ``code_part_kb: 0``: everything in one code layer,
as before), and with ~2 MB of real ``.py`` files added (small files that compress like code):
with the code layer in parts (``pack.code_part_kb``, default 256), as one code layer, and with
the edit in a vendored module instead of ``train.py``. Targets: <= 64 KB, <= 0.5 s.

Each tool's median round gives the time ratios, with the number of rounds beside it (the best
round is printed too, never used for a ratio), and median CPU seconds (user + sys of the tool
and its children) give the same ratios independently of other load. ``tar | gzip`` runs in
the first round only (slow, no target).
Targets: the j2c pack stage >= 4x faster than venv-pack and within 1.5x of ``tar | zstd -T0
-3``, an archive no larger than venv-pack's, a resubmit <= 1 s.

Run: ``python benchmarks/pack.py [--rounds 3] [--big-file]`` (builds the inputs on first use).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from inputs import BENCH_DIR, bench_project, bench_venv, tree_bytes

BIN = Path(sys.executable).parent
J2C = BIN / "j2c"
VENV_PACK = BIN / "venv-pack"


@dataclass
class Run:
    seconds: float
    cpu_seconds: float
    archive_bytes: int | None = None
    peak_rss_mb: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _run(command: list[str] | str, *, env: dict[str, str] | None = None) -> tuple[Run, str]:
    """Wall and CPU seconds (user + sys, the command and its children) and peak RSS of one
    command, and its stdout."""
    with tempfile.TemporaryFile("w+") as out:
        started = time.perf_counter()
        process = subprocess.Popen(command, shell=isinstance(command, str), stdout=out, env=env)
        _pid, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode != 0:
            raise SystemExit(f"failed ({process.returncode}): {command}")
        out.seek(0)
        cpu = usage.ru_utime + usage.ru_stime
        return Run(seconds, cpu, peak_rss_mb=usage.ru_maxrss / 1024), out.read()


def raw_read(venv: Path, _work: Path) -> Run:
    started = time.perf_counter()
    cpu_started = time.process_time()
    for dirpath, _dirs, files in os.walk(venv):
        for name in files:
            path = os.path.join(dirpath, name)
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb", buffering=0) as handle:
                    while handle.read(1 << 20):
                        pass
    return Run(time.perf_counter() - started, time.process_time() - cpu_started)


def j2c_build(project: Path, venv: Path, data: Path) -> tuple[Run, dict[str, Any]]:
    env = {**os.environ, "J2C_DATA_DIR": str(data)}
    env.pop("J2C_CONFIG", None)
    command = [str(J2C), "build", "--code-path", str(project), "--call-path", "train.py"]
    command += ["--venv-path", str(venv), "--json"]
    run, out = _run(command, env=env)
    result = json.loads(out)
    venv_layer = next(layer for layer in result["layers"] if layer["role"] == "venv")
    run.archive_bytes = venv_layer["bytes"]
    run.extra["venv_layer_s"] = venv_layer["seconds"]
    return run, result


_PACK_STAGE = """
import sys
from j2c_server.pack import PackSpec, pack
spec = PackSpec(code_path=sys.argv[1], call_path="train.py", venv_path=sys.argv[2])
pack(spec, sys.argv[3])
"""


def j2c_pack(venv: Path, work: Path) -> Run:
    """The pack stage alone, as the pipeline runs it: validate, scan, write both layers."""
    cache = work / "cache"
    shutil.rmtree(cache, ignore_errors=True)  # cold: nothing cached
    command = [sys.executable, "-c", _PACK_STAGE, str(work / "project"), str(venv), str(cache)]
    run, _ = _run(command)
    run.archive_bytes = max(path.stat().st_size for path in (cache / "blobs").iterdir())
    return run


def j2c(venv: Path, work: Path) -> Run:
    data = work / "data"
    shutil.rmtree(data, ignore_errors=True)  # cold: nothing cached, nothing in the store
    run, _ = j2c_build(work / "project", venv, data)
    return run


def venv_pack(venv: Path, work: Path) -> Run:
    out = work / "venv-pack.tar.gz"
    out.unlink(missing_ok=True)
    run, _ = _run([str(VENV_PACK), "-p", str(venv), "-o", str(out), "-q"])
    run.archive_bytes = out.stat().st_size
    return run


def shell(template: str, suffix: str) -> Callable[[Path, Path], Run]:
    def tool(venv: Path, work: Path) -> Run:
        out = work / f"out.{suffix}"
        run, _ = _run(template.format(venv=venv, out=out))
        run.archive_bytes = out.stat().st_size
        run.peak_rss_mb = None  # the shell's, not the tools'
        return run

    return tool


OURS = "j2c pack stage"
TOOLS: dict[str, Callable[[Path, Path], Run]] = {
    OURS: j2c_pack,
    "j2c build (+ publish)": j2c,
    "venv-pack 0.2 (gzip)": venv_pack,
    "tar | zstd -T0 -3": shell("tar -C '{venv}' -cf - . | zstd -T0 -3 -q -f -o '{out}'", "tar.zst"),
    "tar | gzip": shell("tar -C '{venv}' -cf - . | gzip > '{out}'", "tar.gz"),
    "raw read (the limit)": raw_read,
}
ONCE = {"tar | gzip"}  # slow, and no target depends on it: measured in the first round only


def resubmit(project: Path, venv: Path, data: Path, times: int) -> list[dict[str, Any]]:
    rows = []
    for i in range(times):
        with (project / "train.py").open("a") as script:
            script.write(f"# resubmit {i}\n")
        run, result = j2c_build(project, venv, data)
        written = sum(layer["bytes"] for layer in result["layers"] if not layer["reused"])
        venv_reused = next(x["reused"] for x in result["layers"] if x["role"] == "venv")
        rows.append(
            {
                "wall_s": run.seconds,
                "reported_s": result["seconds"],
                "bytes_written": written,
                "venv_reused": venv_reused,
            }
        )
    return rows


def big_file_project(root: Path, *, sources: bool = False) -> Path:
    """The benchmark project (code, a notebook, a 2.6 MB CSV, 2 MB of weights) plus a 200 MB
    data file of random bytes; with ``sources``, ~2 MB of real Python modules (the stdlib's)
    as well: small files that compress like code, not like generated text."""
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(bench_project(), root, symlinks=True)
    # Its own entry point: the benchmark's train.py needs the benchmark venv (numpy).
    (root / "train.py").write_text("import sys\nprint('training', sys.argv[1:])\n")
    with open(root / "data" / "images.bin", "wb") as handle:
        for _ in range(200):
            handle.write(os.urandom(1_000_000))
    if sources:
        copied = 0
        (root / "vendored").mkdir()
        for module in sorted(Path(os.__file__).parent.glob("*.py")):
            if copied > 2_000_000:
                break
            if module.stat().st_size < 1_000_000:
                shutil.copy(module, root / "vendored" / module.name)
                copied += module.stat().st_size
    return root


async def big_file_case(
    big_file_mb: str | None,
    *,
    sources: bool = False,
    code_part_kb: str | None = None,
    edit: str = "train.py",
) -> dict[str, Any]:
    """Cold send, then sends after one-line edits of ``edit``, through a real server."""
    from pipeline import Server, submit_and_follow

    project = big_file_project(BENCH_DIR / "bigfile-project", sources=sources)
    body = {"code_path": project.name, "call_path": f"{project.name}/train.py"}
    with tempfile.TemporaryDirectory(prefix="j2c-bench-") as data:
        # The server's config (j2c.yaml in its Jupyter config dir): the threshold under test,
        # and PYTHONPATH for the job, so that its j2c-unpack is the j2c under test too.
        config = Path(data) / "jupyter-config"
        config.mkdir()
        lines = ["scheduler:", "  local:", "    pass_env: [PYTHONPATH]"]
        pack = {"big_file_mb": big_file_mb, "code_part_kb": code_part_kb}
        if any(value is not None for value in pack.values()):
            lines += ["pack:"]
            lines += [f"  {key}: {value}" for key, value in pack.items() if value is not None]
        (config / "j2c.yaml").write_text("\n".join(lines) + "\n")
        os.environ["JUPYTER_CONFIG_DIR"] = str(config)
        async with Server(BENCH_DIR, Path(data)) as server:
            cold = await submit_and_follow(server, body)
            edits = []
            for number in range(3):
                with open(project / edit, "a") as script:
                    script.write(f"# edit {number}\n")
                edits.append(await submit_and_follow(server, {**body, "new": True}))
    os.environ.pop("JUPYTER_CONFIG_DIR", None)
    for job in (cold, *edits):
        assert job.get("status") == "succeeded", job
    return {"cold": cold, "edits": edits}


def big_file_report() -> None:
    import asyncio

    print("big file: the benchmark project + a 200 MB data file, one-line edits, real server")
    runs = {
        "big files as blobs (default)": asyncio.run(big_file_case(None)),
        "all in one code layer (before)": asyncio.run(big_file_case("0", code_part_kb="0")),
        "blobs, + 2 MB of real .py files": asyncio.run(big_file_case(None, sources=True)),
        "same, one code layer (no parts)": asyncio.run(
            big_file_case(None, sources=True, code_part_kb="0")
        ),
        "same, parts, edit a vendored .py": asyncio.run(
            big_file_case(None, sources=True, edit="vendored/csv.py")
        ),
    }
    print(f"  {'':44}{'bytes uploaded':>16}{'s to submitted':>16}")
    for name, run in runs.items():
        for what, job in [("cold", run["cold"]), *(("edit", e) for e in run["edits"])]:
            label = f"{name}: {what}"
            print(f"  {label:<44}{job['bytes_uploaded']:>16}{job['submitted']:>16.2f}")

    def best(name: str) -> tuple[int, float]:
        """The median bytes and seconds of its edits."""
        edits = runs[name]["edits"]
        return (
            int(statistics.median(e["bytes_uploaded"] for e in edits)),
            statistics.median(e["submitted"] for e in edits),
        )

    sent, seconds = best("big files as blobs (default)")
    old_sent, old_seconds = best("all in one code layer (before)")
    src_sent, src_seconds = best("blobs, + 2 MB of real .py files")
    one_sent, one_seconds = best("same, one code layer (no parts)")
    mid_sent, mid_seconds = best("same, parts, edit a vendored .py")
    edits = len(runs["big files as blobs (default)"]["edits"])
    print(f"targets (medians of {edits} edits):")
    print(f"  bytes uploaded after an edit = {sent} B (target <= 65536); before: {old_sent} B,")
    print(f"    {old_sent / max(sent, 1):.0f}x fewer; with 2 MB of real .py files: {src_sent} B")
    print(f"    (one code layer: {one_sent} B; editing a vendored module: {mid_sent} B)")
    print(
        f"  s to submitted after an edit = {seconds:.2f} s (target <= 0.5); before: "
        f"{old_seconds:.2f} s ({old_seconds / seconds:.1f}x); with the .py files: "
        f"{src_seconds:.2f} s (one code layer {one_seconds:.2f} s, a vendored module "
        f"{mid_seconds:.2f} s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--big-file", action="store_true", help="Only the big-file case.")
    args = parser.parse_args()
    if args.big_file:
        big_file_report()
        return
    venv = bench_venv()
    files, size = tree_bytes(venv)
    work = BENCH_DIR / "pack-run"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    shutil.copytree(bench_project(), work / "project", symlinks=True)
    print(
        f"venv: {files} files, {size / 1e6:.0f} MB; {os.cpu_count()} CPUs; "
        f"{args.rounds} interleaved rounds\n"
    )

    runs: dict[str, list[Run]] = {name: [] for name in TOOLS}
    for round_number in range(args.rounds):
        for name, tool in TOOLS.items():
            if round_number == 0 or name not in ONCE:
                runs[name].append(tool(venv, work))

    median = {name: statistics.median(r.seconds for r in rs) for name, rs in runs.items()}
    ours = median[OURS]
    cpu = {name: statistics.median(r.cpu_seconds for r in rs) for name, rs in runs.items()}
    print(
        f"{'tool':<24}{'n':>3}{'median s':>10}{'best s':>8}{'MB/s':>7}{'vs j2c':>8}{'CPU s':>7}"
        f"{'archive MB':>12}{'peak RSS MB':>13}"
    )
    for name, rs in runs.items():
        archive = rs[-1].archive_bytes
        rss = rs[-1].peak_rss_mb
        print(
            f"{name:<24}{len(rs):>3}{median[name]:>10.2f}{min(r.seconds for r in rs):>8.2f}"
            f"{size / 1e6 / median[name]:>7.0f}{median[name] / ours:>7.2f}x{cpu[name]:>7.2f}"
            f"{archive / 1e6 if archive else float('nan'):>12.1f}"
            f"{rss if rss else float('nan'):>13.0f}"
        )
    layer_s = statistics.median(r.extra["venv_layer_s"] for r in runs["j2c build (+ publish)"])
    print(f"\n(j2c build's venv layer write alone, as the command reports it: {layer_s:.2f} s)")

    vp, zstd = median["venv-pack 0.2 (gzip)"], median["tar | zstd -T0 -3"]
    j2c_archive = runs[OURS][-1].archive_bytes or 0
    vp_archive = runs["venv-pack 0.2 (gzip)"][-1].archive_bytes or 0
    print(f"\ntargets (medians of {len(runs[OURS])} rounds; each side its whole process):")
    print(f"  venv-pack / j2c pack      = {vp / ours:5.2f}x   (target >= 4)")
    print(f"  j2c pack / tar|zstd       = {ours / zstd:5.2f}x   (target <= 1.5)")
    print(
        f"  CPU seconds, same ratios  = {cpu['venv-pack 0.2 (gzip)'] / cpu[OURS]:5.2f}x, "
        f"{cpu[OURS] / cpu['tar | zstd -T0 -3']:.2f}x (independent of other load)"
    )
    print(f"  j2c archive / venv-pack's = {j2c_archive / vp_archive:5.2f}    (target <= 1)")

    print("\nresubmit after a one-line code change (warm cache and store):")
    rows = resubmit(work / "project", venv, work / "data", times=3)
    for row in rows:
        print(
            f"  j2c build: {row['wall_s']:.2f} s (command), {row['reported_s']:.2f} s "
            f"(reported), {row['bytes_written']} bytes written, "
            f"venv layer {'reused' if row['venv_reused'] else 'RE-PACKED'}"
        )
    wall = statistics.median(r["wall_s"] for r in rows)
    print(f"  median of {len(rows)}: {wall:.2f} s   (target <= 1)")
    shutil.rmtree(work, ignore_errors=True)
    print()
    big_file_report()


if __name__ == "__main__":
    main()
