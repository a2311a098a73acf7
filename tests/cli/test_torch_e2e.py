"""Real PyTorch, end to end: the example project ``examples/torch-digits`` sent with ``j2c
submit`` from a venv made the way a lab user makes one (``/usr/bin/python3 -m venv
--system-site-packages`` over Debian's ``python3-torch``), so torch comes from the base and
j2c ships nothing of it. One process on the local scheduler trains exactly as the same script
run by hand; two ranks under ``--launcher torchrun`` (real torchrun, gloo, DDP) meet and end
with the same weights on every rank, on the local scheduler, a real two-node Slurm and two
containers of the platform image (which has the same PyTorch)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.cli import test_multinode_e2e as multinode
from tests.support.ci import engine_missing
from tests.support.frontends import RunJ2C

# The multi-node tests' fixtures: the backend under test (local, a two-node Slurm, containers)
# and ``j2c`` on it.
backend = multinode.backend
run_j2c = multinode.run_j2c
slurm_two_nodes = multinode.slurm_two_nodes

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "torch-digits"
SYSTEM_PYTHON = "/usr/bin/python3"
# Small enough for seconds on a CPU, long enough that a wrong gradient shows in the loss.
STEPS = ["--steps", "40", "--log-every", "20", "--checkpoint-every", "20"]
FINAL = re.compile(r"final step (\d+) loss ([0-9.]+) accuracy ([0-9.]+) weights sha256:(\w+)")


@pytest.fixture(scope="module")
def torch_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The lab user's venv: over the system Python that has PyTorch, empty itself."""
    found = subprocess.run(
        [SYSTEM_PYTHON, "-c", "import torch; print(torch.__version__)"],
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0:
        engine_missing(f"no PyTorch in {SYSTEM_PYTHON} (apt-get install python3-torch)")
    path = tmp_path_factory.mktemp("torch-venv") / "venv"
    subprocess.run(
        [SYSTEM_PYTHON, "-m", "venv", "--system-site-packages", "--without-pip", str(path)],
        check=True,
    )
    return path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "torch-digits"
    ignored = shutil.ignore_patterns(".venv", "checkpoints", "outputs", "__pycache__")
    shutil.copytree(EXAMPLE, root, ignore=ignored)
    return root


def finals(text: str) -> list[tuple[int, float, float, str]]:
    return [(int(m[1]), float(m[2]), float(m[3]), m[4]) for m in FINAL.finditer(text)]


def by_hand(venv: Path, project: Path, *args: str) -> tuple[int, float, float, str]:
    """The script run in the lab, as its user would before sending it."""
    done = subprocess.run(
        [str(venv / "bin" / "python"), "train.py", *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (result,) = finals(done.stdout)
    shutil.rmtree(project / "checkpoints", ignore_errors=True)  # the job starts from step 0
    shutil.rmtree(project / "outputs", ignore_errors=True)
    return result


@pytest.mark.parametrize("backend", ["local"], indirect=True)
def test_a_pytorch_job_trains_exactly_as_the_script_run_by_hand(
    run_j2c: RunJ2C, project: Path, torch_venv: Path
) -> None:
    expected = by_hand(torch_venv, project, *STEPS)
    result = run_j2c(
        "submit", "train.py", "--venv-path", str(torch_venv), "--", *STEPS, cwd=project
    )
    assert result.returncode == 0, result.stderr
    # Same seed, same data, same torch: bit for bit the same weights.
    assert finals(result.stdout) == [expected], result.stdout
    record = json.loads(run_j2c("list", "--json").stdout)[0]
    # torch came from the base Python, not from the layers: what travelled is a few kB.
    layers = record["stages"]["pack"]["output"]["layers"]
    assert {layer["role"] for layer in layers} == {"code", "venv"}, layers
    assert sum(layer["size"] for layer in layers) < 100_000, layers
    artifacts = {a["name"] for a in record["results"]["artifacts"]}
    assert "metrics.json" in artifacts and any(a.startswith("checkpoints/") for a in artifacts)


def test_two_ranks_of_real_torchrun_train_one_model(
    run_j2c: RunJ2C, project: Path, torch_venv: Path
) -> None:
    alone = by_hand(torch_venv, project, *STEPS)
    result = run_j2c(
        "submit",
        "train.py",
        "--venv-path",
        str(torch_venv),
        "--nodes",
        "2",
        "--launcher",
        "torchrun",
        "--",
        *STEPS,
        cwd=project,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    ranks = {
        line.split(" ", 1)[0]: finals(line)[0]
        for line in result.stdout.splitlines()
        if FINAL.search(line)
    }
    # One line per rank, each from its own node (j2c's [N] prefix).
    assert sorted(ranks) == ["[0]", "[1]"], result.stdout
    # DDP kept the ranks' weights identical...
    assert ranks["[0]"][3] == ranks["[1]"][3], ranks
    # ...and two half-batches with averaged gradients are the full batch of one process, up
    # to the order floating-point sums take.
    step, loss, _, _ = ranks["[0]"]
    assert step == alone[0] and loss == pytest.approx(alone[1], rel=1e-3), (ranks, alone)
    assert "training on cpu (2 ranks)" in result.stdout
    # What each rank's Python holds reached the lab whole (on Slurm, srun cuts a long line
    # into labelled pieces; the lab learns the target's image from it).
    assert "inventory line was not kept" not in result.stderr
