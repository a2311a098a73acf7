"""The ``export NAME=VALUE`` lines the throw-away services' scripts print and keep in
``DIR/env`` (scripts/slurm-up.sh, platform-image.sh, ray-up.sh), read back as a dict; used by
the tests' fixtures and by the benchmarks."""

from __future__ import annotations

from pathlib import Path


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
