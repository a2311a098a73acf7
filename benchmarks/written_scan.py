"""The cost of finding what a job wrote into its working copy (``unpack/written.py``), on a
working copy of about 15k files, side by side with what a user would otherwise run.

The working copy is the benchmark project plus the benchmark venv's library twice as vendored
trees (hard links: nothing is copied), about 15k regular files outside ``__pycache__``.
Measured, median of ``--rounds``: ``take_snapshot`` (before the entry point runs) and
``written_files`` after the job wrote three files and changed one (after it ends, and at every
periodic sync), against ``find -newer`` (the Unix way to list files changed since a moment: it
misses a file restored with an old mtime, which the snapshot's inode and size catch) and
``git status --porcelain`` on the same tree committed (its index warm, untracked cache on).

Run: ``python benchmarks/written_scan.py [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from inputs import bench_project, bench_venv  # noqa: E402

from j2c_server.unpack.written import take_snapshot, written_files  # noqa: E402


def working_copy(work: Path) -> Path:
    code = work / "code"
    shutil.copytree(bench_project(), code, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    for copy in ("a", "b"):  # twice: the scan skips the venv's __pycache__ folders
        target = code / "vendor" / copy
        shutil.copytree(bench_venv() / "lib", target, symlinks=True, copy_function=os.link)
    return code


def timed(call: Callable[[], object], rounds: int) -> tuple[float, object]:
    seconds, result = [], None
    for _ in range(rounds):
        start = time.perf_counter()
        result = call()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), result


def git(code: Path, *args: str) -> str:
    who = {
        f"GIT_{role}_{what}": "bench"
        for role in ("AUTHOR", "COMMITTER")
        for what in ("NAME", "EMAIL")
    }
    env = {**os.environ, **who}
    done = subprocess.run(["git", *args], cwd=code, env=env, capture_output=True, text=True)
    done.check_returncode()
    return done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="j2c-bench-written-") as tmp:
        code = working_copy(Path(tmp))
        git(code, "init", "-q")
        git(code, "config", "core.untrackedCache", "true")
        git(code, "add", "-A")
        git(code, "commit", "-q", "-m", "tree")
        stamp = Path(tmp) / "stamp"
        stamp.touch()
        snap_s, snapshot = timed(lambda: take_snapshot(code), args.rounds)
        assert isinstance(snapshot, dict)
        time.sleep(0.01)  # the job's writes come after the stamp, in mtime too
        (code / "models").mkdir()
        for name in ("models/a.bin", "models/b.bin", "metrics.json"):
            (code / name).write_bytes(os.urandom(1024))
        with (code / "data" / "train.csv").open("a") as changed:
            changed.write("1,2,3,x\n")
        scan_s, written = timed(lambda: written_files(code, snapshot), args.rounds)
        find_s, found = timed(
            lambda: subprocess.run(
                ["find", str(code), "-type", "f", "-newer", str(stamp)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split(),
            args.rounds,
        )
        git_s, status = timed(lambda: git(code, "status", "--porcelain").splitlines(), args.rounds)
        assert isinstance(written, list) and isinstance(found, list) and isinstance(status, list)
        files = len(snapshot)
        print(f"\nWhat a job wrote, in a working copy of {files:,} files", end="")
        print(f" (median of {args.rounds})\n")
        print("| what | seconds | found | vs written_files |")
        print("|---|---|---|---|")
        rows = [
            ("j2c take_snapshot (before the entry point)", snap_s, files),
            ("j2c written_files (after the job, each sync)", scan_s, len(written)),
            ("find -newer STAMP -type f", find_s, len(found)),
            ("git status --porcelain (warm index)", git_s, len(status)),
        ]
        for what, seconds, count in rows:
            print(f"| {what} | {seconds:.3f} | {count} | {seconds / scan_s:.2f}x |")


if __name__ == "__main__":
    main()
