"""j2c on Ray against Ray's own code shipping (``runtime_env``), side by side on one real head.

Both sides are typed as a user types them: ``j2c submit … --scheduler ray`` and
``ray job submit --working-dir . …``, each timed from the command's start to the job's first line
of user code (``epoch 0:``) and to its exit. Three comparisons, in one run:

(a) **a one-line edit** of the benchmark project, interleaved rounds: j2c ships the project and
    the 400 MB benchmark venv (the venv layer was published once before the rounds); Ray ships
    the folder as a ``working_dir`` zip and runs it with the same venv's python, already on the
    node (as an image would have it). Bytes: j2c's ``bytes_uploaded`` (its job record) against
    the bytes Ray's CLI sent to the dashboard (counted by a loopback proxy in front of it).
(b) **the environment**: the benchmark venv as j2c's layer, cold (a fresh store and node cache)
    then warm (an edit: venv layer reused, node cache hit), against Ray's ``pip`` runtime_env
    building the same requirements, cold (first use of that spec on this head) then warm (the
    same spec again). One cold round each (Ray caches the env by its spec for the head's life).
(c) **a project over Ray's package limits** (the project plus a 520 MiB data file: over the
    dashboard's 100 MiB request body limit, which the job CLI meets first, and the GCS's
    512 MiB package limit): Ray's answer, and j2c sending it.

Run: ``python benchmarks/ray.py [--rounds 3] [--big-mib 520] [--skip-pip]``. It uses the head
named by ``$J2C_RAY_DIR`` (``scripts/ray-up.sh DIR``), else starts one with that script and stops
it at the end. The store is ``file://`` (the head is this machine), so bytes and not the network
are what differ; the machine may be shared: compare ratios within the run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(ROOT))

from inputs import BENCH_PACKAGES, bench_project, bench_venv  # noqa: E402

from tests.support.exports import parse_exports, read_exports  # noqa: E402

MARKER = "epoch 0:"
J2C = Path(sys.executable).parent / "j2c"


# ------------------------------------------------------------------ the head and its proxy


@dataclass
class Head:
    address: str  # the dashboard's URL
    ray: Path  # Ray's CLI
    started_in: Path | None  # a head this run started (stopped at the end)


def start_head() -> Head:
    named = os.environ.get("J2C_RAY_DIR")
    if named and (Path(named) / "env").is_file():
        values, started = read_exports(Path(named)), None
    else:
        started = Path(tempfile.mkdtemp(prefix="j2c-bench-ray-"))
        out = subprocess.run(
            [ROOT / "scripts" / "ray-up.sh", started], capture_output=True, text=True, check=True
        )
        values = parse_exports(out.stdout)
    return Head(values["J2C_SCHEDULER__RAY__ADDRESS"], Path(values["J2C_RAY_BIN"]) / "ray", started)


class CountingProxy:
    """A loopback TCP proxy in front of the dashboard, counting the bytes clients send through
    it (Ray's CLI uploads its package over HTTP; the websocket of logs goes through too)."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port or 80
        self.sent = 0
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        threading.Thread(target=self._serve, args=(ready,), daemon=True).start()
        ready.wait()

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        ready.set()
        self._loop.run_forever()

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, count: bool
    ) -> None:
        with contextlib.suppress(ConnectionError, asyncio.CancelledError):
            while data := await reader.read(1 << 16):
                if count:
                    self.sent += len(data)
                writer.write(data)
                await writer.drain()
        writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection(self._host, self._port)
        await asyncio.gather(self._pipe(reader, up_w, True), self._pipe(up_r, writer, False))


# ------------------------------------------------------------------ one command, timed


@dataclass
class Run:
    first_line_s: float | None
    total_s: float
    rc: int
    lines: list[str] = field(default_factory=list)
    stdout: str = ""
    bytes_sent: int = 0

    def first(self) -> float:
        if self.first_line_s is None:
            tail = "\n".join(self.lines[-15:])
            raise SystemExit(f"the job never printed {MARKER!r} (exit {self.rc}):\n{tail}")
        return self.first_line_s


def timed(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 1800) -> Run:
    """Run ``cmd``; the time its output (either stream) first shows :data:`MARKER`, and its end."""
    start = time.monotonic()
    proc = subprocess.Popen(
        [str(c) for c in cmd],
        cwd=cwd,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: dict[str, float] = {}
    lines: list[str] = []
    stdout: list[str] = []

    def read(stream: object, keep: list[str] | None) -> None:
        for line in stream:  # type: ignore[attr-defined]
            if MARKER in line and "first" not in seen:
                seen["first"] = time.monotonic() - start
            lines.append(line.rstrip("\n"))
            if keep is not None:
                keep.append(line)

    readers = [
        threading.Thread(target=read, args=(proc.stdout, stdout)),
        threading.Thread(target=read, args=(proc.stderr, None)),
    ]
    for reader in readers:
        reader.start()
    rc = proc.wait(timeout=timeout)
    for reader in readers:
        reader.join()
    return Run(seen.get("first"), time.monotonic() - start, rc, lines, "".join(stdout))


# ------------------------------------------------------------------ the two sides


@dataclass
class Sides:
    head: Head
    proxy: CountingProxy
    venv: Path
    work: Path

    def j2c(self, project: Path, data: str, cache: str) -> Run:
        env = {
            "J2C_DATA_DIR": str(self.work / data),
            "J2C_SCHEDULER__RAY__ADDRESS": self.head.address,
            "J2C_SCHEDULER__RAY__CACHE_DIR": str(self.work / cache),
            "J2C_STORAGE__SHARED": "true",  # the head is this machine: it reads the folder
        }
        cmd = [J2C, "submit", "--json", "--scheduler", "ray", "--venv-path", self.venv, "train.py"]
        run = timed(cmd, project, env)
        if run.rc == 0:
            record = json.loads(run.stdout)
            upload = record["stages"].get("upload", {}).get("output", {})
            run.bytes_sent = int(upload.get("bytes_uploaded", 0))
        return run

    def ray(self, project: Path, runtime_env: dict[str, object] | None = None) -> Run:
        before = self.proxy.sent
        entry = ["python"] if runtime_env and "pip" in runtime_env else [self.venv / "bin/python"]
        cmd: list[str | Path] = [self.head.ray, "job", "submit", "--address", self.proxy.address]
        cmd += ["--working-dir", "."]
        if runtime_env:
            cmd += ["--runtime-env-json", json.dumps(runtime_env)]
        run = timed([*cmd, "--", *entry, "train.py"], project, {})
        run.bytes_sent = self.proxy.sent - before
        return run


# Both sides keep what they sent by its content (Ray's package URI is a hash of the folder): an
# edit seen by an earlier run of this script would be found there, not sent.
NONCE = os.urandom(4).hex()


def edit(project: Path, n: int) -> None:
    """The one-line edit: a changed line at the end of ``train.py``."""
    path = project / "train.py"
    lines = path.read_text().splitlines()
    if lines[-1].startswith("# edit"):
        lines.pop()
    path.write_text("\n".join([*lines, f"# edit {NONCE} {n}"]) + "\n")


def copy_project(work: Path, name: str) -> Path:
    target = work / name
    shutil.copytree(bench_project(), target, symlinks=True)
    return target


# ------------------------------------------------------------------ the comparisons


def compare_edit(sides: Sides, rounds: int) -> list[str]:
    ours, theirs = copy_project(sides.work, "edit-j2c"), copy_project(sides.work, "edit-ray")
    first_j2c = sides.j2c(ours, "data-edit", "cache-edit")  # publishes the venv layer once
    first_j2c.first()
    sides.ray(theirs).first()
    j2c_runs, ray_runs = [], []
    for n in range(1, rounds + 1):
        edit(ours, n)
        edit(theirs, n)
        pair = [lambda: sides.j2c(ours, "data-edit", "cache-edit"), lambda: sides.ray(theirs)]
        if n % 2 == 0:
            pair.reverse()
        done = [run() for run in pair]
        j2c_run, ray_run = (done[0], done[1]) if n % 2 else (done[1], done[0])
        j2c_runs.append(j2c_run)
        ray_runs.append(ray_run)
    return [
        _row("(a) one-line edit → first line, median", j2c_runs, ray_runs, "first"),
        _row("(a) one-line edit → job ended, median", j2c_runs, ray_runs, "total"),
        _bytes_row("(a) bytes sent for the edit, median", j2c_runs, ray_runs),
        f"<!-- first send (not in the rows): j2c {first_j2c.total_s:.1f} s with the 400 MB venv, "
        f"{first_j2c.bytes_sent / 1e6:.1f} MB -->",
    ]


def compare_env(sides: Sides) -> list[str]:
    ours, theirs = copy_project(sides.work, "env-j2c"), copy_project(sides.work, "env-ray")
    pip = {"pip": list(BENCH_PACKAGES)}
    cold_j2c = sides.j2c(ours, "data-env", "cache-env")
    cold_ray = sides.ray(theirs, pip)
    edit(ours, 1)
    edit(theirs, 1)
    warm_j2c = sides.j2c(ours, "data-env", "cache-env")
    warm_ray = sides.ray(theirs, pip)
    return [
        _row("(b) the 400 MB env, cold → first line", [cold_j2c], [cold_ray], "first"),
        _row("(b) the same env again, warm → first line", [warm_j2c], [warm_ray], "first"),
    ]


def compare_big(sides: Sides, big_mib: int) -> list[str]:
    ours, theirs = copy_project(sides.work, "big-j2c"), copy_project(sides.work, "big-ray")
    big = ours / "data" / "big.bin"
    with big.open("wb") as out:
        for _ in range(big_mib):
            out.write(os.urandom(1 << 20))
    os.link(big, theirs / "data" / "big.bin")
    ray_run = sides.ray(theirs)
    # Ray 2.60 through the Jobs API: the dashboard refuses the upload (HTTP 413, its 100 MiB
    # request limit) before the GCS's own 512 MiB limit could.
    said = [line for line in ray_run.lines if re.search(r"exceed|413", line)]
    refusal = said[-1] if said else None
    j2c_run = sides.j2c(ours, "data-edit", "cache-edit")  # the venv layer is already there
    ray_says = (
        f"refused ({_plain(refusal)[:140]})" if refusal and ray_run.rc else f"exit {ray_run.rc}"
    )
    ours_says = (
        f"ran: first line {j2c_run.first():.1f} s, {j2c_run.bytes_sent / 2**20:.0f} MiB sent"
        if j2c_run.rc == 0
        else f"exit {j2c_run.rc}"
    )
    return [f"| (c) project + {big_mib} MiB data file | {ours_says} | Ray: {ray_says} | | |"]


# ------------------------------------------------------------------ the table


def _plain(line: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", line).split(" -- ", 1)[-1].replace("|", "/")


def _row(what: str, ours: list[Run], theirs: list[Run], which: str) -> str:
    def value(run: Run) -> float:
        return run.first() if which == "first" else run.total_s

    mine = statistics.median(value(r) for r in ours)
    peer = statistics.median(value(r) for r in theirs)
    best = f"best {min(value(r) for r in ours):.2f} / {min(value(r) for r in theirs):.2f}"
    return f"| {what} | {mine:.2f} s | {peer:.2f} s | {mine / peer:.2f}x | {best} |"


def _bytes_row(what: str, ours: list[Run], theirs: list[Run]) -> str:
    mine = statistics.median(r.bytes_sent for r in ours)
    peer = statistics.median(r.bytes_sent for r in theirs)
    return f"| {what} | {mine / 1e3:.1f} kB | {peer / 1e3:.1f} kB | {mine / peer:.4f}x | |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--big-mib", type=int, default=520)
    parser.add_argument("--skip-pip", action="store_true", help="leave out (b)")
    args = parser.parse_args()
    venv = bench_venv()
    head = start_head()
    work = Path(tempfile.mkdtemp(prefix="j2c-bench-ray-work-"))
    try:
        sides = Sides(head, CountingProxy(head.address), venv, work)
        rows = compare_edit(sides, args.rounds)
        if not args.skip_pip:
            rows += compare_env(sides)
        rows += compare_big(sides, args.big_mib)
        print(f"\nj2c vs Ray's runtime_env on one Ray head, {args.rounds} interleaved rounds\n")
        print("| what | j2c | Ray runtime_env | ratio | best j2c / Ray |")
        print("|---|---|---|---|---|")
        print("\n".join(rows))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if head.started_in is not None:
            subprocess.run([ROOT / "scripts" / "ray-down.sh", head.started_in], check=False)


if __name__ == "__main__":
    main()
