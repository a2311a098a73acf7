"""The PyTorch example sent to a container of the platform image (which has PyTorch), beside what
a user would do by hand: send -> first training step, as the user waits for it.

Side by side, interleaved, each round:

- ``podman run``: the same image, the project bind-mounted, ``python3 train.py`` (no packing,
  no store; what a user types on a machine that has the engine and the files);
- ``j2c cold``: ``j2c submit`` of a project never sent, onto an empty node cache (pack, upload,
  create, download, verify, extract, run);
- ``j2c warm``: the same project again, other arguments (a new job of the same manifest: the
  node cache holds its layers);
- ``j2c edit``: one line of ``train.py`` changed, sent again (the code layer packed and uploaded
  again, the venv's reused).

Times are from starting the command to the line ``first step`` the job prints, read from the
command's output as it streams (``j2c submit`` follows the job's log). Medians of the rounds
with their count; the ratios are of the medians. Bytes: what j2c uploaded for the first send and
for the edit, beside the image's size (what a registry push of an image with the project baked
in would move at least).

Run: ``J2C_PODMAN_DIR=... python benchmarks/torch_send.py [--rounds 3] [--steps 200]``
(``scripts/platform-image.sh DIR`` builds the image with PyTorch and starts podman; the lab side
needs ``/usr/bin/python3`` with torch: ``scripts/ensure-torch.sh``).
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.exports import read_exports  # noqa: E402

EXAMPLE = ROOT / "examples" / "torch-digits"
J2C = str(Path(sys.executable).with_name("j2c"))
MARK = "first step"


def until_first_step(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, str]:
    """Seconds from start to the first-step line, and everything the command printed."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    seen: float | None = None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if seen is None and MARK in line:
            seen = time.perf_counter() - started
    code = proc.wait()
    text = "".join(lines)
    if code != 0 or seen is None:
        raise SystemExit(f"{argv[:3]} failed (exit {code}):\n{text}")
    return seen, text


def uploaded(env: dict[str, str], cwd: Path) -> int:
    """Bytes the newest job's upload stage moved."""
    done = subprocess.run([J2C, "list", "--json"], env=env, cwd=cwd, capture_output=True, text=True)
    record = json.loads(done.stdout)[0]
    return int(record["stages"]["upload"]["output"].get("bytes_uploaded", 0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    podman_dir = os.environ.get("J2C_PODMAN_DIR")
    if not podman_dir:
        raise SystemExit("set J2C_PODMAN_DIR (scripts/platform-image.sh DIR)")
    engine = read_exports(Path(podman_dir))
    image = engine["PLATFORM_IMAGE"]
    podman_env = {**os.environ, "CONTAINERS_CONF": engine["CONTAINERS_CONF"]}
    size = int(
        subprocess.run(
            ["podman", "image", "inspect", "--format", "{{.Size}}", image],
            env=podman_env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    train = ["--steps", str(args.steps), "--checkpoint-every", "0", "--log-every", "100"]
    names = ("podman run", "j2c cold", "j2c warm", "j2c edit")
    times: dict[str, list[float]] = {name: [] for name in names}
    sent: dict[str, list[int]] = {"first send": [], "edit": []}
    for _ in range(args.rounds):
        work = Path(tempfile.mkdtemp(prefix="j2c-torch-bench-"))
        try:
            os.chmod(work, 0o755)  # the job's uid reads the store and the cache below it
            project = work / "torch-digits"
            shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns(".venv", "checkpoints"))
            venv = project / ".venv"
            subprocess.run(
                ["/usr/bin/python3", "-m", "venv", "--system-site-packages", "--without-pip", venv],
                check=True,
            )
            by_hand = [
                "podman", "run", "--rm", "--user", "1000", "-v", f"{project}:/work:ro",
                "-w", "/work", "-e", "J2C_OUTPUT_DIR=/tmp/out", image,
                "python3", "train.py", *train,
            ]  # fmt: skip
            times["podman run"].append(until_first_step(by_hand, podman_env, work)[0])

            env = {k: v for k, v in os.environ.items() if not k.startswith("J2C_")}
            env.update(
                J2C_DATA_DIR=str(work / "data"),
                J2C_SCHEDULER__DEFAULT="container",
                J2C_SCHEDULER__CONTAINER__SOCKET=engine["J2C_SCHEDULER__CONTAINER__SOCKET"],
                J2C_SCHEDULER__CONTAINER__CACHE_DIR=str(work / "cache"),
                J2C_DEFAULT_IMAGE=image,
                J2C_STORAGE__SHARED="true",
                CONTAINERS_CONF=engine["CONTAINERS_CONF"],
            )
            submit = [J2C, "submit", "train.py", "--venv-path", str(venv), "--"]
            times["j2c cold"].append(until_first_step([*submit, *train], env, project)[0])
            sent["first send"].append(uploaded(env, project))
            again = [*submit, *train, "--seed", "1"]
            times["j2c warm"].append(until_first_step(again, env, project)[0])
            with (project / "train.py").open("a") as handle:
                handle.write("# one line changed\n")
            times["j2c edit"].append(until_first_step([*submit, *train], env, project)[0])
            sent["edit"].append(uploaded(env, project))
        finally:
            shutil.rmtree(work, ignore_errors=True)

    base = statistics.median(times["podman run"])
    print(f"PyTorch example, container backend, {image}, {args.rounds} rounds, medians:")
    for name, values in times.items():
        median = statistics.median(values)
        print(
            f"  {name:<11} {median:6.2f} s to the first step  ({median / base:4.2f}x podman run; "
            f"best {min(values):.2f} s, n={len(values)})"
        )
    for name, values in sent.items():
        median = statistics.median(values)
        ratio = size / max(median, 1)
        print(f"  bytes uploaded, {name}: {median:,.0f}  (image: {size:,} bytes, {ratio:,.0f}x)")


if __name__ == "__main__":
    main()
