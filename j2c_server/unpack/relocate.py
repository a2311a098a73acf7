"""Making the extracted venv work at its new home, on this container's interpreter.

Always, in both modes:

- ``pyvenv.cfg``: ``home``, ``executable`` and ``command`` name this container's base interpreter;
- ``bin/python*`` links that pointed at the lab's base interpreter point at this one.

When layers moved (relocate mode), the files that embed an old absolute path are rewritten. After
a move only these break (no compiled extension embeds the venv's path):

- in ``bin/``: console-script shebangs (``#!/old/venv/bin/python``, and pip's ``#!/bin/sh`` +
  ``'''exec' "/old/venv/bin/python"`` form for long paths or paths with spaces) and the activate
  scripts;
- in ``site-packages``: ``*.pth`` files, ``__editable__*finder.py``, ``*.egg-link`` and
  ``*.dist-info/direct_url.json`` (a percent-encoded ``file://`` URL), which is how editable
  installs of packages inside the project point at the code layer.

Last, the venv's own interpreter is asked for ``sys.prefix``: it must be the venv's new path. A
venv whose ``pyvenv.cfg`` is missing or wrong silently runs as the base interpreter (exit 0,
user packages missing), so this is checked, not trusted.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote

from j2c_server.unpack.errors import VenvBroken
from j2c_server.unpack.interpreter import Interpreter

SCRIPT_LIMIT = 1024 * 1024  # larger files in bin/ are programs, not scripts
VERIFY_TIMEOUT_S = 120
# What may follow a path for the match to be the whole path ('/old' must not match '/older').
_PATH_END = rb"(?![\w.+~@%-])"


class PathMap:
    """Rewrites every occurrence of an old absolute path (or its URL form) to the new one."""

    def __init__(self, moves: dict[str, str]) -> None:
        table: dict[bytes, bytes] = {}
        for old, new in moves.items():
            table[os.fsencode(old)] = os.fsencode(new)
            table[quote(old).encode()] = quote(new).encode()  # file:// URLs
        self._table = table
        # Longest first: a venv inside the project ('/p/.venv') before the project ('/p').
        olds = sorted(table, key=len, reverse=True)
        self._pattern = re.compile(b"(" + b"|".join(map(re.escape, olds)) + b")" + _PATH_END)

    def __call__(self, data: bytes) -> bytes:
        if not self._table:
            return data
        return self._pattern.sub(lambda match: self._table[match.group(1)], data)


def fix_venv(
    venv: Path, interpreter: Interpreter, moves: dict[str, str], *, home: Path | None = None
) -> int:
    """Point the venv at ``interpreter`` and rewrite moved paths; return how many files changed.

    ``home`` is where the venv will run when that is not where it is now (the layer cache
    relocates a venv in a temporary folder, then renames it into place).
    """
    changed = _point_at_interpreter(venv, interpreter, home or venv)
    if moves:
        rewrite = PathMap(moves)
        for path in _files_with_paths(venv):
            changed += _rewrite(path, rewrite)
    return changed


def verify_venv(venv: Path) -> None:
    """Raise VenvBroken unless ``<venv>/bin/python`` runs as this venv (``-B``: writing no
    bytecode into it, which may be the layer cache's shared, read-only copy)."""
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "VIRTUAL_ENV")}
    try:
        probe = subprocess.run(
            [str(python), "-I", "-B", "-c", "import sys; print(sys.prefix)"],
            capture_output=True,
            text=True,
            env=env,
            timeout=VERIFY_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise VenvBroken(f"the venv's interpreter {python} cannot start: {exc}") from None
    if probe.returncode != 0:
        raise VenvBroken(
            f"the venv's interpreter {python} failed (exit code {probe.returncode}): "
            f"{probe.stderr.strip()[-2000:]}"
        )
    prefix = probe.stdout.strip()
    if os.path.realpath(prefix) != os.path.realpath(venv):
        raise VenvBroken(
            f"the venv at {venv} runs as the base interpreter (sys.prefix is {prefix})",
            hint="its pyvenv.cfg is missing or unreadable",
        )


def mentions(venv: Path, paths: list[str]) -> bool:
    """Does any file that relocation rewrites hold one of ``paths`` (e.g. the project's)?"""
    finder = PathMap({path: "" for path in paths})
    for path in _files_with_paths(venv):
        if path.stat().st_size <= SCRIPT_LIMIT:
            data = path.read_bytes()
            if b"\0" not in data and finder(data) != data:
                return True
    return False


def _point_at_interpreter(venv: Path, interpreter: Interpreter, home: Path) -> int:
    cfg = venv / "pyvenv.cfg"
    if not cfg.is_file():
        raise VenvBroken(f"the venv layer has no pyvenv.cfg at {cfg}")
    changed = _rewrite(cfg, lambda data: _config_for(data, interpreter, home))
    for link in (venv / "bin").glob("python*"):
        if link.is_symlink() and not _points_inside(link, venv):
            link.unlink()
            link.symlink_to(interpreter.executable)
            changed += 1
    return changed


def _config_for(data: bytes, interpreter: Interpreter, venv: Path) -> bytes:
    """``pyvenv.cfg`` with ``home``, ``executable`` and ``command`` naming ``interpreter``."""
    lines = data.decode().splitlines()
    values = {k.strip().lower(): v.strip() for k, _, v in (line.partition("=") for line in lines)}
    system_site = values.get("include-system-site-packages", "false").lower() == "true"
    flags = "--system-site-packages " if system_site else ""
    new_values = {
        "home": str(interpreter.home),
        "executable": str(interpreter.executable),
        "command": f"{interpreter.executable} -m venv {flags}{venv}",
    }
    out = []
    for line in lines:
        key = line.partition("=")[0].strip().lower()
        out.append(f"{key} = {new_values[key]}" if "=" in line and key in new_values else line)
    return ("\n".join(out) + "\n").encode()


def _points_inside(link: Path, venv: Path) -> bool:
    target = os.path.normpath(os.path.join(link.parent, os.readlink(link)))
    return Path(target).is_relative_to(venv)


def _files_with_paths(venv: Path) -> Iterator[Path]:
    """The files of a venv that may embed an absolute path of the venv or the project."""
    bin_dir = venv / "bin"
    if bin_dir.is_dir():
        for path in sorted(bin_dir.iterdir()):
            if path.is_file() and not path.is_symlink():
                yield path
    for site in _site_packages(venv):
        for pattern in ("*.pth", "*.egg-link", "__editable__*finder.py"):
            yield from sorted(site.glob(pattern))
        yield from sorted(site.glob("*.dist-info/direct_url.json"))


def _site_packages(venv: Path) -> list[Path]:
    found: dict[Path, Path] = {}
    for lib in ("lib", "lib64"):
        for site in (venv / lib).glob("python*/site-packages"):
            found.setdefault(site.resolve(), site)  # lib64 is usually a link to lib
    return list(found.values())


def _rewrite(path: Path, transform: Callable[[bytes], bytes]) -> int:
    """Apply ``transform`` to a small text file; 1 if it changed, else 0. Mode is kept."""
    info = path.stat()
    if info.st_size > SCRIPT_LIMIT:
        return 0
    data = path.read_bytes()
    if b"\0" in data:
        return 0  # a binary program
    new = transform(data)
    if new == data:
        return 0
    # Written beside and renamed over: works for read-only files, never leaves half a file.
    temporary = path.with_name(f".{path.name}.j2c-rewrite")
    temporary.write_bytes(new)
    os.chmod(temporary, stat.S_IMODE(info.st_mode))
    os.replace(temporary, path)
    return 1
