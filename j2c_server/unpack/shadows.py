"""Which of the venv's packages hide the image's own copies, said in ``j2c-unpack``'s log.

The lab's preflight warns about the same (``shadowed_package``, pack/plan.py), but against the
lab's base interpreter; this checks the interpreter the job really runs on, whose packages (a
CUDA build of torch, the image's numpy) a ``--system-site-packages`` venv is meant to use. A venv
without system site packages sees none of them, so nothing is shadowed there.
"""

from __future__ import annotations

import os
import re
import site
import sys
from pathlib import Path

from j2c_server.unpack.log import warn

# The same rules as pack/venv.py's (unpack/ does not import pack/): a dist's folder name, PEP 503
# names, and the packages every venv has its own copy of.
_DIST_RE = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+?)(-py[\d.]+)?\.(dist|egg)-info$")
VENV_TOOLING = frozenset({"pip", "setuptools", "wheel", "distribute"})


def distributions(directory: Path) -> dict[str, str]:
    """Normalised project name → version for the dists installed in ``directory``."""
    try:
        names = os.listdir(directory)
    except OSError:
        return {}
    found: dict[str, str] = {}
    for name in names:
        match = _DIST_RE.match(name)
        if match:
            project = re.sub(r"[-_.]+", "-", match.group("name")).lower()
            found[project] = match.group("version")
    return found


def read_pyvenv_cfg(path: Path) -> dict[str, str]:
    """``pyvenv.cfg``'s keys (lower case) and values; the lab's packer reads it with this too."""
    values: dict[str, str] = {}
    for line in path.read_text(errors="replace").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip().lower()] = value.strip()
    return values


def base_site_dirs() -> list[Path]:
    """This interpreter's own site folders (not a venv's, when j2c-unpack runs from one)."""
    return [Path(path) for path in site.getsitepackages([sys.base_prefix])]


def shadowed(venv: Path, base_dirs: list[Path]) -> list[tuple[str, str, str]]:
    """(name, venv version, image version) for each venv dist that also exists in the base."""
    try:
        config = read_pyvenv_cfg(venv / "pyvenv.cfg")
    except OSError:
        return []
    if config.get("include-system-site-packages", "false").lower() != "true":
        return []
    base: dict[str, str] = {}
    for folder in base_dirs:
        for name, version in distributions(folder).items():
            base.setdefault(name, version)
    ours: dict[str, str] = {}
    for folder in sorted(venv.glob("lib/python*/site-packages")):
        ours.update(distributions(folder))
    return [
        (name, version, base[name])
        for name, version in sorted(ours.items())
        if name in base and name not in VENV_TOOLING
    ]


def shadowed_shipped(venv: Path, base_dirs: list[Path]) -> list[tuple[str, str, str]]:
    """(name, shipped version, image version) for each shipped lab-base dist (base_packages.py,
    ``<venv>/j2c-base``) that the image has too."""
    shipped = distributions(venv / "j2c-base")
    if not shipped:
        return []
    base: dict[str, str] = {}
    for folder in base_dirs:
        for name, version in distributions(folder).items():
            base.setdefault(name, version)
    return [(n, v, base[n]) for n, v in sorted(shipped.items()) if n in base]


def report_shadowed(venv: Path) -> None:
    """One log line per shadowed package (the job still runs: shadowing may be on purpose)."""
    base_dirs = base_site_dirs()
    for name, ours, theirs in shadowed(venv, base_dirs):
        warn(
            "python",
            f"the venv's {name} {ours} shadows the image's {name} {theirs}: the job imports "
            "the venv's copy",
        )
    for name, ours, theirs in shadowed_shipped(venv, base_dirs):
        warn(
            "python",
            f"the shipped {name} {ours} (from the lab's base) shadows the image's {name} "
            f"{theirs}: the job imports the shipped copy",
        )
