"""The throw-away services the tests start with the project's scripts (scripts/slurm-up.sh,
ray-up.sh, platform-image.sh): the ``export NAME=VALUE`` lines those scripts print and keep in
``DIR/env``, read back as a dict (by the fixtures and the benchmarks), and one way to start a
service for a test session and stop it at the end."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.ci import engine_missing

NOT_INSTALLABLE = 2  # the scripts' exit code when their service cannot be installed here


def parse_exports(text: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.removeprefix("export ").partition("=")
        if line.startswith("export ") and sep:
            values[name] = value
    return values


def read_exports(folder: Path) -> dict[str, str]:
    """What a script started in ``folder`` exported (its ``env`` file)."""
    return parse_exports((folder / "env").read_text())


@contextmanager
def started_service(up: Path, down: Path, what: str) -> Iterator[dict[str, str]]:
    """``up DIR`` in a new folder outside pytest's (the services may run as other users, and
    pytest's folders are private to their owner); its exports, then ``down DIR`` and the folder
    removed. Skipped, with the script's reason, when it cannot install ``what`` here (failed
    under CI: tests/support/ci.py); failed, with its stderr, on any other error."""
    directory = Path(tempfile.mkdtemp(prefix=f"j2c-{what.lower()}-"))
    try:
        started = subprocess.run(
            [up, directory], capture_output=True, text=True, timeout=900, check=False
        )
        if started.returncode == NOT_INSTALLABLE:
            engine_missing(f"no {what} here: {started.stderr.strip().splitlines()[-1]}")
        if started.returncode != 0:
            pytest.fail(f"{up.name} failed:\n{started.stderr}")
        yield parse_exports(started.stdout)
    finally:
        subprocess.run([down, directory], timeout=120, check=False)
        shutil.rmtree(directory, ignore_errors=True)
