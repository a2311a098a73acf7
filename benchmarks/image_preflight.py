"""The preflight's image check (``j2c_server/image/``) through the container backend on real
podman and the platform image: what knowing the job's image costs a send, before any upload.

A lab project whose ``--system-site-packages`` venv leans on this machine's Python (regex,
scipy, numpy 2: the platform image lacks them or has numpy 1.24). Per round, interleaved, each
with a fresh data dir: a preflight with no image check (``probe_images: false``: the scan
alone), the first preflight for the image (it is probed: one container through the engine),
and the next one (the inventory is known by the image's ID: nothing started). Beside them, the
way a user would ask the image by hand: ``podman run --rm IMAGE python3 -c <list the
distributions>`` (the minimal image has no pip).

Like for like: the first preflight of a data dir scans with an empty scan cache, the next one
with it filled, so each image-check side is compared with a no-check preflight in the same state
(``none, cold``: a fresh data dir; ``none, warm``: the same data dir's second preflight). The
project's venv is small (the lab's own packages reached through ``--system-site-packages``), so
the scan itself is short here.

Run: ``J2C_PODMAN_DIR=DIR python benchmarks/image_preflight.py [--rounds 3]``
(``scripts/platform-image.sh DIR`` starts podman and builds the image; without the variable it
is run into a temporary folder).
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from j2c_server.jobs.service import JobService  # noqa: E402
from tests.support.exports import read_exports  # noqa: E402
from tests.support.lab_python import LAB_PYTHON, image_request, image_settings  # noqa: E402
from tests.support.lab_python import lab_project as make_lab_project  # noqa: E402
from tests.support.podman import Podman  # noqa: E402

TRAIN = "import regex\nimport scipy.stats\nimport numpy as np\n"


def podman_here() -> tuple[Podman, dict[str, str]]:
    folder = os.environ.get("J2C_PODMAN_DIR") or tempfile.mkdtemp(prefix="j2c-bench-podman-")
    if not (Path(folder) / "env").is_file():
        subprocess.run([ROOT / "scripts" / "platform-image.sh", folder], check=True)
    values = read_exports(Path(folder))
    podman = Podman(values["J2C_SCHEDULER__CONTAINER__SOCKET"], values["PLATFORM_IMAGE"])
    return podman, values


async def preflight(podman: Podman, project: Path, data: Path, *, probe: bool) -> float:
    service = JobService(image_settings(podman, data, probe=probe))
    try:
        start = time.perf_counter()
        await service.preflight(image_request(project, "train.py"))
        return time.perf_counter() - start
    finally:
        await service.stop()


LIST = (
    "import importlib.metadata as m\n"
    "for d in m.distributions(): print(d.metadata['Name'], d.version)"
)


def by_hand(podman: Podman, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(
        ["podman", "--runtime", "runc", "run", "--rm", podman.image, "python3", "-c", LIST],
        env={**os.environ, **env},
        capture_output=True,
        check=True,
    )
    return time.perf_counter() - start


async def main_async(rounds: int) -> None:
    # tests.support.lab_python's own check skips or fails a test; a benchmark just stops.
    lab_has = [str(LAB_PYTHON), "-I", "-c", "import regex, scipy, numpy"]
    if subprocess.run(lab_has, capture_output=True).returncode != 0:
        raise SystemExit("this machine's Python has no regex/scipy/numpy: no gap to find")
    podman, exported = podman_here()
    env = {k: v for k, v in exported.items() if k == "CONTAINERS_CONF"}
    times: dict[str, list[float]] = {
        "none": [],
        "none_warm": [],
        "first": [],
        "next": [],
        "hand": [],
    }
    with tempfile.TemporaryDirectory(prefix="j2c-bench-image-") as tmp:
        project = make_lab_project(Path(tmp) / "proj", {"train.py": TRAIN})
        for n in range(rounds):
            plain = Path(tmp) / f"n{n}"
            times["none"].append(await preflight(podman, project, plain, probe=False))
            times["none_warm"].append(await preflight(podman, project, plain, probe=False))
            data = Path(tmp) / f"d{n}"
            times["first"].append(await preflight(podman, project, data, probe=True))
            times["next"].append(await preflight(podman, project, data, probe=True))
            times["hand"].append(by_hand(podman, env))
    med = {kind: statistics.median(values) for kind, values in times.items()}
    print(f"\nThe preflight's image check, {rounds} interleaved rounds (medians, seconds)\n")
    print("| what | n | median | best | over the same scan-cache state without the check |")
    print("|---|---|---|---|---|")
    rows = [
        ("preflight, no image check, empty scan cache (the scan alone)", "none", None),
        ("preflight, no image check, scan cache filled", "none_warm", None),
        (
            "preflight, first for the image (probed: one container), empty scan cache",
            "first",
            "none",
        ),
        ("preflight, next (inventory known by image ID), scan cache filled", "next", "none_warm"),
        ("by hand: podman run --rm IMAGE python3 -c <list distributions>", "hand", None),
    ]
    for what, kind, base in rows:
        extra = f"{med[kind] - med[base]:+.3f}" if base else "-"
        print(
            f"| {what} | {len(times[kind])} | {med[kind]:.3f} | {min(times[kind]):.3f} | {extra} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(main_async(parser.parse_args().rounds))


if __name__ == "__main__":
    main()
