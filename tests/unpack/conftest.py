"""Fixtures of the j2c-unpack tests: the published lab project, and a store per test."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.projects import make_venv, write
from tests.unpack.helpers import publish_project
from tests.unpack.lab import make_lab

JOB_PY = """\
import os, pathlib, sys

print("USER CODE RAN", sys.argv[1:], flush=True)
pathlib.Path(os.environ["J2C_OUTPUT_DIR"], "result.txt").write_text("done")
sys.exit(int(sys.argv[-1]) if sys.argv[-1:] and sys.argv[-1].isdigit() else 0)
"""


@dataclass(frozen=True)
class PublishedLab:
    """The lab project packed and published; its original folders are moved away."""

    manifest_uri: str
    project: Path  # original paths: they no longer exist (see ``original_paths_free``)
    venv: Path
    moved_to: Path


@pytest.fixture(scope="session")
def published_lab(tmp_path_factory: pytest.TempPathFactory) -> PublishedLab:
    root = tmp_path_factory.mktemp("lab")
    lab = make_lab(root)
    uri = publish_project(
        lab.project, root / "store", "train.py", venv=lab.venv, args=["--epochs=1"]
    )
    # As on the GPU cluster: the lab's folders do not exist where the job runs.
    home = lab.project.parent
    moved_to = home.with_name(home.name + " (moved away)")
    home.rename(moved_to)
    return PublishedLab(uri, lab.project, lab.venv, moved_to)


@pytest.fixture
def original_paths_free(published_lab: PublishedLab) -> Iterator[PublishedLab]:
    """The lab's original paths are free during the test and freed again after it."""
    home = published_lab.project.parent
    assert not home.exists()
    yield published_lab
    shutil.rmtree(home, ignore_errors=True)


@dataclass(frozen=True)
class SmallJob:
    """A small project with its own venv (outside the project), ready to publish."""

    project: Path
    venv: Path
    store: Path

    def publish(self, **options: Any) -> str:
        return publish_project(self.project, self.store, "job.py", venv=self.venv, **options)


@pytest.fixture
def small_job(tmp_path: Path, store: Path) -> SmallJob:
    """``job.py`` says that it ran, writes ``result.txt`` to the output dir, and exits with its
    last argument when that is a number."""
    project = tmp_path / "lab" / "project"
    write(project / "job.py", JOB_PY)
    return SmallJob(project, make_venv(tmp_path / "lab" / "venv"), store)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "store"
    path.mkdir()
    return path
