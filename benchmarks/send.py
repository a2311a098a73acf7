"""The send decision: what it costs to tell "nothing changed: attach" from "N files changed".

On the benchmark project + its ~400 MB / 12.7k-file venv (``benchmarks/inputs.py``), each send
scans once (validate, stat walk, fingerprints, walk files, diff with the job it is compared
with) in a warm pack worker, as the server and the CLI do. Side by side, in the same run:

- a bare stat walk of the same trees (``os.scandir`` + ``lstat``, nothing else): the floor;
- ``git status --porcelain`` on a git repository holding the same files, after a warm-up
  ``git status`` (its index is current): what a user would run to see what changed.

Cases: the first send (walk files written), an unchanged re-send (attach), and a re-send after
a one-line edit (diff against the earlier walk), each twice: with the venv's scan kept by the
long-lived worker under a file-system watch (the server and a kernel: ``pack/venv_scans.py``),
and walking the venv every time (``watch_venv: false``, what a CLI send does). Targets: <= 0.3 s
for a decision; from the server, median <= 0.05 s for an unchanged re-send and after an edit.

Run: ``python benchmarks/send.py [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from inputs import bench_project, bench_venv

from j2c_server.jobs.pack_worker import PackWorkers
from j2c_server.pack import PackSpec

TARGET_S = 0.3
KEPT_TARGET_S = 0.05  # median, from the server (the kept venv scan)


def stat_walk(root: Path) -> int:
    count = 0
    stack = [str(root)]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                entry.stat(follow_symlinks=False)
                count += 1
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
    return count


def git_status_seconds(project: Path, venv: Path, work: Path, rounds: int) -> list[float]:
    """``git status`` over a repository with the project and the venv in its tree."""
    repo = work / "repo"
    shutil.copytree(project, repo, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    shutil.copytree(venv, repo / "venv", symlinks=True)
    git = ["git", "-C", str(repo), "-c", "core.untrackedCache=true"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run(
        [*git, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "x"], check=True
    )
    subprocess.run([*git, "status", "--porcelain"], check=True, capture_output=True)
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        subprocess.run([*git, "status", "--porcelain"], check=True, capture_output=True)
        times.append(time.perf_counter() - started)
    return times


async def j2c_sends(
    project: Path, venv: Path, cache: Path, rounds: int, *, watch: bool
) -> dict[str, list[float]]:
    spec = PackSpec(code_path=project, call_path="train.py", venv_path=venv, watch_venv=watch)
    workers = PackWorkers(1)
    times: dict[str, list[float]] = {"first": [], "unchanged": [], "edited": []}
    edited = project / "train.py"
    original = edited.read_text()
    try:
        await workers.scan(spec, tmp_cache := cache / "warmup")  # start the worker
        shutil.rmtree(tmp_cache)
        for round_ in range(rounds):
            round_cache = cache / f"r{round_}"
            started = time.perf_counter()
            first = (await workers.scan(spec, round_cache)).report
            times["first"].append(time.perf_counter() - started)
            started = time.perf_counter()
            again = (await workers.scan(spec, round_cache, compare=first.content)).report
            times["unchanged"].append(time.perf_counter() - started)
            assert again.content == first.content and again.changed_files == 0
            edited.write_text(original + f"# edit {round_}\n")
            started = time.perf_counter()
            after = (await workers.scan(spec, round_cache, compare=first.content)).report
            times["edited"].append(time.perf_counter() - started)
            assert after.changed_files == 1, after.changes
            edited.write_text(original)
    finally:
        edited.write_text(original)
        await workers.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    project, venv = bench_project(), bench_venv()
    files = stat_walk(venv) + stat_walk(project)
    with tempfile.TemporaryDirectory(prefix="j2c-bench-send-") as tmp:
        work = Path(tmp)
        floor = []
        for _ in range(rounds):
            started = time.perf_counter()
            stat_walk(project)
            stat_walk(venv)
            floor.append(time.perf_counter() - started)
        sends = {}
        for watch, label in ((True, "kept venv scan"), (False, "venv walked")):
            measured = asyncio.run(j2c_sends(project, venv, work / label, rounds, watch=watch))
            sends.update({f"{case}, {label}": values for case, values in measured.items()})
        git = git_status_seconds(project, venv, work, rounds)

    # Ratios of medians, with the count of rounds; the best round is printed beside, never
    # used for a ratio (one lucky round on a shared machine says little).
    med_floor, med_git = statistics.median(floor), statistics.median(git)
    print(f"\nsend decision on {files} entries (project + venv), medians of {rounds} rounds")
    print(f"{'what':<40}{'median s':>10}{'best s':>9}{'x stat walk':>13}{'x git status':>14}")
    rows = [(f"j2c: {case}", values) for case, values in sends.items()]
    rows += [("bare stat walk (floor)", floor), ("git status --porcelain (warm)", git)]
    for name, values in rows:
        median = statistics.median(values)
        print(
            f"{name:<40}{median:>10.3f}{min(values):>9.3f}"
            f"{median / med_floor:>13.2f}{median / med_git:>14.2f}"
        )
    worst = max(statistics.median(values) for values in sends.values())
    verdict = "met" if worst <= TARGET_S else "NOT met"
    print(f"\ntarget: a decision <= {TARGET_S} s: {verdict} (slowest case median {worst:.3f} s)")
    kept = [statistics.median(sends[f"{case}, kept venv scan"]) for case in ("unchanged", "edited")]
    verdict = "met" if max(kept) <= KEPT_TARGET_S else "NOT met"
    print(
        f"target from the server: median <= {KEPT_TARGET_S} s unchanged / after an edit: "
        f"{verdict} ({kept[0]:.3f} / {kept[1]:.3f} s)"
    )


if __name__ == "__main__":
    main()
