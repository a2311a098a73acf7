"""Container scheduler: job start-up through j2c next to ``podman run`` of the same command.

Measured, in one run, on the platform image (``scripts/platform-image.sh``):

- a trivial command (``python3 -c "print('hi')"``): submit → first log line and submit →
  finished through ``ContainerScheduler`` (Docker Engine API on podman's socket: create, start,
  follow the logs, inspect), next to ``podman run --rm`` of the same command reading its stdout;
- a real j2c job: ``j2c-unpack`` of a small published project (manifest, code layer fetched,
  verified, extracted; its script prints one line) through ``ContainerScheduler``, next to
  ``podman run --rm`` of the same script with the project bind-mounted (no j2c at all).

Like with like: both sides end with the container removed (j2c's results stage reads the exit
code and outputs, then removes it; ``podman run --rm`` removes it before it exits), and the rounds
are interleaved (j2c first in even rounds, podman first in odd ones) so a drift in the machine's
load falls on both. The headline is the real job's per-job overhead: j2c's median minus
podman's, to finished and removed. Uses the podman service named by
``$J2C_PODMAN_DIR/env`` (what ``scripts/platform-image.sh DIR`` writes), else starts one with that
script in a temporary folder and stops it at the end.

Run: ``python benchmarks/containers.py [--jobs 5]`` (about a minute with the image built).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from j2c_server.config import J2CSettings, load_settings
from j2c_server.pack import PackSpec, make_manifest, pack, publish
from j2c_server.schedulers.base import JobSpec
from j2c_server.schedulers.container.backend import ContainerScheduler
from j2c_server.storage import open_store
from j2c_server.wire.api import JobStatus

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

REPO = Path(__file__).resolve().parents[1]
TRIVIAL = ["python3", "-c", "print('hi', flush=True)"]
SCRIPT = "import sys\nprint('first line', flush=True)\n"


def podman_env(folder: Path) -> tuple[dict[str, str], bool]:
    """The exports of a running podman service; whether this run started it."""
    given = Path(os.environ.get("J2C_PODMAN_DIR", "/nonexistent")) / "env"
    started = not given.is_file()
    if started:
        out = subprocess.run(
            ["bash", str(REPO / "scripts" / "platform-image.sh"), str(folder)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    else:
        out = given.read_text()
    values = {}
    for line in out.splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        values[name] = value
    os.environ["CONTAINERS_CONF"] = values["CONTAINERS_CONF"]
    return values, started


def podman_run(image: str, command: list[str], mounts: list[str]) -> tuple[float, float]:
    """``podman run --rm``: seconds to its first stdout line, and to its exit."""
    volumes = [arg for mount in mounts for arg in ("-v", mount)]
    start = time.perf_counter()
    with subprocess.Popen(
        ["podman", "run", "--rm", *volumes, image, *command], stdout=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdout is not None
        proc.stdout.readline()
        first = time.perf_counter() - start
        proc.stdout.read()
    assert proc.returncode == 0, proc.returncode
    return first, time.perf_counter() - start


async def j2c_run(
    scheduler: ContainerScheduler, image: str, command: list[str], key: str
) -> tuple[float, float]:
    """Through the backend: seconds to the first line the command printed, and to finished with
    its results read and its container removed."""
    start = time.perf_counter()
    handle = await scheduler.submit(
        JobSpec(key=key, job_id=key, name="bench", image=image, command=command)
    )
    first = None
    async for line in scheduler.follow_logs(handle):
        if first is None and not line.text.startswith("j2c: "):
            first = time.perf_counter() - start
    while (state := await scheduler.status(handle)).status not in (
        JobStatus.succeeded,
        JobStatus.failed,
    ):
        await asyncio.sleep(0.05)
    assert state.status == JobStatus.succeeded, state
    await scheduler.results(handle)  # what the results stage does last: the container goes
    return first or float("nan"), time.perf_counter() - start


async def publish_project(work: Path, settings: J2CSettings) -> tuple[Path, str]:
    project = work / "proj"
    project.mkdir()
    (project / "train.py").write_text(SCRIPT)
    old = time.time() - 3600  # the packer distrusts files written in the last seconds
    for path in (project, project / "train.py"):
        os.utime(path, (old, old))
    spec = PackSpec(code_path=project, call_path="train.py")
    result = await asyncio.to_thread(pack, spec, work / "layer-cache")
    store = open_store(settings.storage_url(), settings.storage)
    published = await publish(store, result, make_manifest(result))
    return project, published.manifest_uri


def rows(
    what: str, ours: list[tuple[float, float]], peer: list[tuple[float, float]]
) -> list[tuple[str, float, float, str]]:
    median = statistics.median
    return [
        (
            f"{what}: submit → first line",
            median(o[0] for o in ours),
            median(p[0] for p in peer),
            "podman run",
        ),
        (
            f"{what}: submit → finished, removed",
            median(o[1] for o in ours),
            median(p[1] for p in peer),
            "podman run",
        ),
    ]


async def measure(args: argparse.Namespace, tmp: Path) -> None:
    values, started = podman_env(tmp / "podman")
    image = values["PLATFORM_IMAGE"]
    try:
        settings = load_settings(
            environ={},
            overrides={
                "data_dir": str(tmp / "data"),
                "storage": {"url": (tmp / "store").as_uri(), "shared": True},
                "scheduler": {"container": {"socket": values["J2C_SCHEDULER__CONTAINER__SOCKET"]}},
            },
        )
        project, manifest = await publish_project(tmp, settings)
        scheduler = ContainerScheduler(settings)
        run_id = f"{os.getpid()}-{time.time_ns()}"
        podman_run(image, TRIVIAL, [])  # the first start warms the engine's caches
        mount = f"{project}:{project}:ro"
        plain = ["python3", str(project / "train.py")]
        trivial, trivial_peer, unpack, unpack_peer = [], [], [], []
        for i in range(args.jobs):
            ours_first = i % 2 == 0
            for side in ("j2c", "podman") if ours_first else ("podman", "j2c"):
                if side == "j2c":
                    trivial.append(await j2c_run(scheduler, image, TRIVIAL, f"b-{run_id}-t{i}"))
                    job = ["j2c-unpack", manifest]
                    unpack.append(await j2c_run(scheduler, image, job, f"b-{run_id}-u{i}"))
                else:
                    trivial_peer.append(podman_run(image, TRIVIAL, []))
                    unpack_peer.append(podman_run(image, plain, [mount]))
        await scheduler.close()
    finally:
        if started:
            subprocess.run(
                [
                    "bash",
                    str(REPO / "scripts" / "platform-image.sh"),
                    str(tmp / "podman"),
                    "--stop",
                ],
                check=False,
            )
    common.print_table(
        f"container scheduler, {args.jobs} jobs each, image {image}",
        "j2c container",
        [*rows("trivial command", trivial, trivial_peer), *rows("j2c job", unpack, unpack_peer)],
    )
    median = statistics.median
    job = median(o[1] for o in unpack) - median(p[1] for p in unpack_peer)
    trivial_cost = median(o[1] for o in trivial) - median(p[1] for p in trivial_peer)
    print(
        f"\nheadline: a real j2c job costs {job * 1000:+.0f} ms per job over podman run --rm of "
        f"its script (to finished and removed); the backend alone, trivial command: "
        f"{trivial_cost * 1000:+.0f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)  # the job's uid reads the project and store below it
        asyncio.run(measure(args, Path(tmp)))


if __name__ == "__main__":
    main()
