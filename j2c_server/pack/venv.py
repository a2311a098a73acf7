"""What the packer needs to know about a virtual environment and its base interpreter.

Reads ``pyvenv.cfg``, lists installed distributions (from ``*.dist-info`` / ``*.egg-info``
folder names, without reading metadata), and finds editable installs and ``.pth`` path entries.

All of it is read as data: a project's venv is the project's to write (a cloned or shared
project brings its own), and ``POST /preflight`` is a read. So the interpreter its ``pyvenv.cfg``
names (``executable``, ``home``) is run only when it is the lab's own Python, the very file
this process runs on or was made from (:func:`_lab_python`), named in its own folder (a link to it
elsewhere makes another prefix, whose ``pyvenv.cfg`` and ``.pth`` files would run too); one short
subprocess asks it for its version and ``sys.path``. Any other base is described from the files
at ``home``: its version from the ``pythonX.Y`` there, its packages from the folders such an
installation keeps them in (:func:`_described`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

from j2c_server.core.errors import PackError
from j2c_server.unpack.shadows import read_pyvenv_cfg  # stdlib only; j2c-unpack reads it too
from j2c_server.wire.manifest import VenvInfo

_VERSION_RE = re.compile(r"^(\d+)\.(\d+)")
_DIST_RE = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+?)(-py[\d.]+)?\.(dist|egg)-info$")
_PROBE = (
    "import json, os, sys; print(json.dumps({'version': '%d.%d' % sys.version_info[:2], "
    "'paths': [p for p in sys.path if os.path.isdir(p)]}))"
)
# Installed into every venv by venv/ensurepip itself: shadowing these is expected, not news.
_VENV_TOOLING = frozenset({"pip", "setuptools", "wheel", "distribute"})


def normalize_dist_name(name: str) -> str:
    """PEP 503 normalisation: 'Scikit_Learn' and 'scikit-learn' are the same project."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class BaseInterpreter:
    executable: str
    version: str
    paths: tuple[str, ...]


@dataclass
class Venv:
    root: Path
    info: VenvInfo
    site_packages: Path | None
    base: BaseInterpreter | None
    config: dict[str, str] = field(default_factory=dict)


def open_venv(venv_path: Path) -> Venv:
    """Validate ``venv_path`` as a venv and collect its facts; PackError(field='venv_path')."""
    root = Path(os.path.abspath(venv_path))
    if not root.exists():
        raise PackError(f"venv path {venv_path} does not exist", field="venv_path")
    if not root.is_dir():
        raise PackError(f"venv path {venv_path} is not a directory", field="venv_path")
    cfg_path = root / "pyvenv.cfg"
    if not cfg_path.is_file():
        raise PackError(
            f"venv path {venv_path} is not a virtual environment (it has no pyvenv.cfg)",
            field="venv_path",
            hint="create one with: python -m venv --system-site-packages <path>",
        )
    try:
        config = read_pyvenv_cfg(cfg_path)
    except OSError as exc:
        raise PackError(f"cannot read {cfg_path}: {exc.strerror}", field="venv_path") from None
    site_packages = _site_packages(root)
    version = _python_version(config, site_packages)
    if version is None:
        raise PackError(
            f"cannot tell the Python version of the venv {venv_path}: pyvenv.cfg has no "
            "'version' and there is no lib/pythonX.Y folder",
            field="venv_path",
        )
    home = config.get("home", "")
    info = VenvInfo(
        python_version=version,
        home=home,
        include_system_site_packages=config.get("include-system-site-packages", "false").lower()
        == "true",
        prompt=config.get("prompt") or None,
    )
    return Venv(
        root=root,
        info=info,
        site_packages=site_packages,
        base=base_interpreter(config, version),
        config=config,
    )


def base_interpreter(config: dict[str, str], version: str) -> BaseInterpreter | None:
    """The venv's base Python as its ``pyvenv.cfg`` names it: asked, when it is the lab's own;
    else described from its files, never run. None when it is not there at all."""
    executable = _base_executable(config, version)
    if executable is None:
        return None
    real = os.path.realpath(executable)
    # A link elsewhere to the lab's binary is another prefix (a venv of its own): described.
    if os.path.realpath(os.path.dirname(executable)) == os.path.dirname(real) and _lab_python(real):
        return probe_interpreter(real)
    return _described(config, executable, version)


def _lab_python(path: str) -> bool:
    """``path`` is the very file this process runs on (or its venv was made from)."""
    ours = {sys.executable, getattr(sys, "_base_executable", sys.executable)}
    try:
        found = os.stat(path)
    except OSError:
        return False
    for candidate in ours:
        with contextlib.suppress(OSError):
            known = os.stat(os.path.realpath(candidate))
            if (known.st_dev, known.st_ino) == (found.st_dev, found.st_ino):
                return True
    return False


def _described(config: dict[str, str], executable: str, version: str) -> BaseInterpreter:
    """A base Python known from its files alone: its ``major.minor`` from the ``pythonX.Y`` at
    ``home`` (the venv's own when that one is there), its ``sys.path`` folders where an
    installation keeps its packages (``lib/pythonX.Y/site-packages``, Debian's
    ``dist-packages``), as far as they exist."""
    home = Path(config.get("home") or os.path.dirname(executable))
    found = []
    with contextlib.suppress(OSError):
        found = sorted(
            f"{m[1]}.{m[2]}"
            for name in os.listdir(home)
            if (m := re.fullmatch(r"python(\d+)\.(\d+)", name))
        )
    base_version = version if version in found or not found else found[0]
    prefix = home.parent
    lib = f"python{base_version}"
    candidates = [
        prefix / "lib" / lib,
        prefix / "lib" / lib / "lib-dynload",
        prefix / "local" / "lib" / lib / "dist-packages",
        prefix / "lib" / lib / "site-packages",
        prefix / "lib" / lib / "dist-packages",
        prefix / "lib" / "python3" / "dist-packages",
    ]
    if prefix == Path("/usr"):
        candidates.insert(2, Path("/usr/local/lib") / lib / "dist-packages")
    paths = tuple(dict.fromkeys(str(p) for p in candidates if p.is_dir()))
    return BaseInterpreter(executable, base_version, paths)


def _site_packages(root: Path) -> Path | None:
    lib = root / "lib"
    candidates = sorted(lib.glob("python*/site-packages")) if lib.is_dir() else []
    return candidates[0] if candidates else None


def _python_version(config: dict[str, str], site_packages: Path | None) -> str | None:
    for key in ("version_info", "version"):
        match = _VERSION_RE.match(config.get(key, ""))
        if match:
            return f"{match.group(1)}.{match.group(2)}"
    if site_packages is not None:
        match = _VERSION_RE.match(site_packages.parent.name.removeprefix("python"))
        if match:
            return f"{match.group(1)}.{match.group(2)}"
    return None


def _base_executable(config: dict[str, str], version: str) -> str | None:
    candidates = [config.get("executable", "")]
    home = config.get("home", "")
    if home:
        candidates += [os.path.join(home, name) for name in (f"python{version}", "python3")]
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


@functools.lru_cache(maxsize=16)
def _probe_cached(executable: str, mtime_ns: int) -> BaseInterpreter | None:
    try:
        proc = subprocess.run(
            [executable, "-I", "-c", _PROBE], capture_output=True, text=True, timeout=30
        )
        data = json.loads(proc.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    version = data.get("version") if isinstance(data, dict) else None
    paths = data.get("paths") if isinstance(data, dict) else None
    if not isinstance(version, str) or not isinstance(paths, list):
        return None  # not the probe's answer: not a Python that can run here
    return BaseInterpreter(executable, version, tuple(str(p) for p in paths))


def probe_interpreter(executable: str) -> BaseInterpreter | None:
    """The version and ``sys.path`` of ``executable`` (the lab's own Python: never one a
    project names, see :func:`base_interpreter`), or None when it cannot run here."""
    try:
        mtime_ns = os.stat(executable).st_mtime_ns
    except OSError:
        return None
    return _probe_cached(executable, mtime_ns)


def distributions(directory: Path) -> dict[str, str]:
    """Normalised project name → version for the dists installed in ``directory``."""
    found: dict[str, str] = {}
    try:
        names = os.listdir(directory)
    except OSError:
        return found
    for name in names:
        match = _DIST_RE.match(name)
        if match:
            found[normalize_dist_name(match.group("name"))] = match.group("version")
    return found


def shadowed_packages(venv: Venv) -> list[tuple[str, str, str]]:
    """(name, venv version, base version) for venv dists that also exist in the base."""
    if venv.site_packages is None or venv.base is None:
        return []
    base: dict[str, str] = {}
    for path in venv.base.paths:
        for name, version in distributions(Path(path)).items():
            base.setdefault(name, version)
    ours = distributions(venv.site_packages)
    return [
        (name, version, base[name])
        for name, version in sorted(ours.items())
        if name in base and name not in _VENV_TOOLING
    ]


@dataclass(frozen=True)
class PathEntry:
    """A folder the venv puts on ``sys.path`` (editable install or ``.pth`` line)."""

    path: Path
    source: str  # the file that names it, relative to site-packages
    project: str | None  # the distribution, for editable installs
    editable: bool


def path_entries(venv: Venv) -> list[PathEntry]:
    """Editable installs (PEP 610 ``direct_url.json``, ``__editable__*.pth``, ``.egg-link``) and
    plain ``.pth`` path lines of the venv."""
    site = venv.site_packages
    if site is None:
        return []
    entries: list[PathEntry] = []
    for direct_url in sorted(site.glob("*.dist-info/direct_url.json")):
        try:
            data = json.loads(direct_url.read_text())
        except (OSError, ValueError):
            continue
        if data.get("dir_info", {}).get("editable") and str(data.get("url", "")).startswith(
            "file:"
        ):
            project = direct_url.parent.name.split("-", 1)[0]
            location = Path(unquote(urlparse(data["url"]).path))
            entries.append(
                PathEntry(location, str(direct_url.relative_to(site)), project, editable=True)
            )
    for pth in sorted([*site.glob("*.pth"), *site.glob("*.egg-link")]):
        try:
            lines = pth.read_text(errors="replace").splitlines()
        except OSError:
            continue
        editable = pth.name.startswith("__editable__") or pth.suffix == ".egg-link"
        for line in lines[:1] if pth.suffix == ".egg-link" else lines:
            line = line.strip()
            if not line or line.startswith(("#", "import ", "import\t")):
                continue
            location = Path(os.path.normpath(site / line))
            entries.append(PathEntry(location, pth.name, None, editable=editable))
    return entries
