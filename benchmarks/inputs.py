"""Realistic benchmark inputs, built once and cached under ``.bench/`` in the repo root.

Every benchmark imports this module instead of building its own inputs, so their numbers are
about the same files:

- :func:`bench_venv`: a ``--system-site-packages`` venv with real packages (numpy, pandas,
  scikit-learn, requests, rich, pyyaml and their dependencies) installed *into* it with pip
  (``--ignore-installed``, so the base interpreter's copies do not make pip skip them), about
  400 MB and 10k files;
- :func:`bench_project`: a small ML project: a script, a notebook, a package, a few MB of data,
  a ``.gitignore`` and a ``.git`` folder, like a data scientist's working folder.

Run ``python benchmarks/inputs.py`` to build both ahead of time (the venv needs the package
index once, about a minute).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = REPO_ROOT / ".bench"
BENCH_PACKAGES = ["numpy", "pandas", "scikit-learn", "requests", "rich", "pyyaml"]

_TRAIN_PY = '''"""Train a small model; the benchmark only ships this file."""

import argparse

import numpy as np
from sklearn.linear_model import LogisticRegression


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()
    x = np.random.default_rng(0).normal(size=(1000, 8))
    y = (x[:, 0] > 0).astype(int)
    for epoch in range(args.epochs):
        model = LogisticRegression().fit(x, y)
        print(f"epoch {epoch}: accuracy {model.score(x, y):.3f}", flush=True)


if __name__ == "__main__":
    main()
'''


def _notebook() -> str:
    cells = [
        {
            "cell_type": "code",
            "execution_count": None,
            "metadata": {},
            "outputs": [],
            "source": ["import numpy as np\n", f"print(np.arange({i}).sum())\n"],
        }
        for i in range(20)
    ]
    return json.dumps(
        {
            "cells": cells,
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}},
            "nbformat": 4,
            "nbformat_minor": 5,
        },
        indent=1,
    )


def bench_venv() -> Path:
    """The cached benchmark venv; created (with network access to the index) when missing."""
    venv = BENCH_DIR / "venv"
    ready = BENCH_DIR / "venv.ready"
    if ready.exists():
        return venv
    shutil.rmtree(venv, ignore_errors=True)
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--ignore-installed",
            *BENCH_PACKAGES,
        ],
        check=True,
    )
    ready.write_text(" ".join(BENCH_PACKAGES) + "\n")
    return venv


def bench_project() -> Path:
    """The cached benchmark project folder (a few MB; rebuilt when missing)."""
    project = BENCH_DIR / "project"
    ready = BENCH_DIR / "project.ready"
    if ready.exists():
        return project
    shutil.rmtree(project, ignore_errors=True)
    (project / "src" / "model").mkdir(parents=True)
    (project / "data").mkdir()
    (project / ".git" / "objects").mkdir(parents=True)
    (project / "train.py").write_text(_TRAIN_PY)
    (project / "explore.ipynb").write_text(_notebook())
    (project / ".gitignore").write_text("outputs/\n*.tmp\n")
    for name in ("__init__.py", "layers.py", "data.py", "metrics.py"):
        (project / "src" / "model" / name).write_text(f'"""{name}"""\n' + "X = 1\n" * 200)
    # Data: partly compressible (CSV text), partly not (random bytes), like real projects.
    rows = "\n".join(f"{i},{i * 0.5},{i % 7},label_{i % 3}" for i in range(100_000))
    (project / "data" / "train.csv").write_text("id,x,y,label\n" + rows + "\n")
    (project / "data" / "weights.bin").write_bytes(os.urandom(2 * 1024 * 1024))
    (project / ".git" / "objects" / "pack.bin").write_bytes(os.urandom(1024 * 1024))
    ready.write_text("ok\n")
    return project


def tree_bytes(root: Path) -> tuple[int, int]:
    """(regular files, bytes) under ``root``, without following symlinks."""
    files = size = 0
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            st = os.lstat(os.path.join(dirpath, name))
            if os.path.isfile(os.path.join(dirpath, name)) and not os.path.islink(
                os.path.join(dirpath, name)
            ):
                files += 1
                size += st.st_size
    return files, size


if __name__ == "__main__":
    for build in (bench_venv, bench_project):
        path = build()
        count, total = tree_bytes(path)
        print(f"{path.relative_to(REPO_ROOT)}: {count} files, {total / 1e6:.0f} MB")
