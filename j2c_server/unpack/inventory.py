"""The inventory of the Python a job runs on: stdlib only, and also a script on its own.

What a ``--system-site-packages`` venv finds under it: the interpreter (version, ABI tags), the
platform (machine, glibc) and the distributions in the base's own site folders (name, version,
top-level import names, ``Requires-Dist``), plus torch's and CUDA's versions read from metadata
(torch is never imported). The lab compares it with what a job needs (``j2c_server.image``).

Two ways it runs:

- in a job, ``j2c-unpack`` calls :func:`report`: one ``inventory: {json}`` line of j2c's,
  which the server that follows the job stores for the job's target. With the node cache it is
  computed once per interpreter and kept in ``<cache>/inventory/``; later jobs find it there
  and say nothing;
- the lab's probe sends this file's source as ``python3 -I -c <source>`` into a short-lived
  container of the image: run as a script, it prints the inventory as JSON. So the module imports
  nothing outside the standard library at its top (``report`` imports j2c-unpack's helpers
  lazily).
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import os
import re
import site
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from importlib import metadata

FORMAT = 2  # 2: reads_manifest_format (re-said once on nodes that said format 1)
PHASE = "inventory"  # its line: ``inventory: {json}``, as j2c's (log.py)
PREFIX = f"j2c: {PHASE}: "  # the line without a tag (j2c-unpack run by hand)
_NAME_RE = re.compile(r"[-_.]+")
_MODULE_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?:\.[^/]*)?\.(py|pyc|so|pyd)$")
_NOT_CODE = (".dist-info", ".data", ".egg-info")
_TORCH_RE = re.compile(r"^(__version__|cuda|hip)\s*(?::\s*[^=]+)?=\s*['\"]([^'\"]+)['\"]", re.M)


def normalize(name: str) -> str:
    """PEP 503: 'Scikit_Learn' and 'scikit-learn' are one project."""
    return _NAME_RE.sub("-", name).lower()


def site_dirs() -> list[str]:
    """The base interpreter's site folders: what a job's venv sees through system site
    packages (not j2c-unpack's own libraries, nor a venv it may run from)."""
    found = [*site.getsitepackages([sys.base_prefix])]
    # Debian's python3 also reads /usr/lib/python3/dist-packages, which the call above names
    # only with the distribution's own patches: take whatever sys.path adds under the prefix.
    for entry in sys.path:
        if entry.endswith(("site-packages", "dist-packages")) and entry.startswith(sys.base_prefix):
            found.append(entry)
    return [path for path in dict.fromkeys(found) if os.path.isdir(path)]


def record_paths(dist: metadata.Distribution) -> list[str]:
    """The paths RECORD lists (its first column), without pathlib objects for each (a big
    package lists thousands); egg-info's ``installed-files.txt`` otherwise."""
    text = dist.read_text("RECORD")
    if text is not None:
        return [row[0] for row in csv.reader(text.splitlines()) if row]
    return [line for line in (dist.read_text("installed-files.txt") or "").splitlines() if line]


def top_level(dist: metadata.Distribution) -> list[str]:
    """The import names a distribution provides: ``top_level.txt``, else its RECORD's first
    path parts (modules and packages, not its metadata or scripts)."""
    text = dist.read_text("top_level.txt")
    if text:
        return sorted({line.strip() for line in text.splitlines() if line.strip()})
    names: set[str] = set()
    for path in record_paths(dist):
        first, sep, _ = path.partition("/")
        if first in ("..", "__pycache__") or first.endswith(_NOT_CODE):
            continue
        if sep:
            if first.isidentifier():
                names.add(first)
        elif (match := _MODULE_RE.match(first)) is not None:
            names.add(match.group(1))
    return sorted(names)


def _torch(dirs: list[str], dists: dict[str, dict[str, Any]]) -> dict[str, str] | None:
    """torch's version and its CUDA (or ROCm) build, from ``torch/version.py``'s text."""
    for folder in dirs:
        try:
            text = Path(folder, "torch", "version.py").read_text(errors="replace")
        except OSError:
            continue
        values = dict(_TORCH_RE.findall(text))
        found = {"version": values.get("__version__", "")}
        for key in ("cuda", "hip"):
            if values.get(key) and values[key] != "None":
                found[key] = values[key]
        cudnn = next((d["version"] for n, d in dists.items() if n.startswith("nvidia-cudnn")), None)
        if cudnn:
            found["cudnn"] = cudnn
        return found
    return None


def _libc() -> tuple[str, str]:
    import platform

    try:
        text = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError, AttributeError):
        text = ""
    name, _, version = text.partition(" ")
    if name and version:
        return name, version
    found = platform.libc_ver()
    return found[0] or "unknown", found[1]


def collect() -> dict[str, Any]:
    """This interpreter's inventory, as JSON-ready data."""
    # Imported here: a warm start (the node cache knows this interpreter) never loads them.
    import platform
    import sysconfig
    from importlib import metadata

    dirs = site_dirs()
    dists: dict[str, dict[str, Any]] = {}
    for dist in metadata.distributions(path=dirs):
        name = dist.metadata["Name"]
        if not name or normalize(name) in dists:
            continue  # the first on the path wins, as an import would
        dists[normalize(name)] = {
            "name": name,
            "version": dist.version,
            "top_level": top_level(dist),
            "requires": list(dist.requires or []),
        }
    libc, libc_version = _libc()
    j2c_version: str | None = None  # run as a probe script: no j2c in the image's own path
    reads: int | None = None  # the newest manifest format this j2c-unpack reads
    with contextlib.suppress(ImportError):
        from j2c_server.core.manifest_plan import READS_FORMAT_VERSION as reads
        from j2c_server.core.version import __version__ as j2c_version
    return {
        "format": FORMAT,
        "created_at": time.time(),
        "j2c_version": j2c_version,
        "reads_manifest_format": reads,
        "python": {
            "version": platform.python_version(),
            "implementation": sys.implementation.name,
            "cache_tag": sys.implementation.cache_tag,
            "soabi": sysconfig.get_config_var("SOABI"),
            "executable": getattr(sys, "_base_executable", None) or sys.executable,
        },
        "platform": {
            "system": platform.system(),
            "machine": platform.machine(),
            "libc": libc,
            "libc_version": libc_version,
        },
        "site_dirs": dirs,
        "distributions": [dists[name] for name in sorted(dists)],
        "torch": _torch(dirs, dists),
    }


def fingerprint() -> str:
    """Which interpreter and site folders this is, cheaply (one listing per folder): the node
    cache's key, so a new image (or a package added to this one) is inventoried again."""
    digest = hashlib.sha256(f"{FORMAT}\0{sys.version}\0{sys.base_prefix}".encode())
    for folder in site_dirs():
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        digest.update(("\0" + folder + "\0" + "\0".join(names)).encode())
    return digest.hexdigest()[:32]


@dataclass
class Said:
    """What :func:`report` knows of this interpreter: the inventory it computed now, or where
    the node cache keeps the one said before (read only when someone asks)."""

    data: dict[str, Any] | None
    kept: Path | None
    fingerprint: str | None

    def inventory(self) -> dict[str, Any]:
        if self.data is None and self.kept is not None:
            try:
                with open(self.kept) as handle:
                    self.data = json.load(handle)
            except (OSError, ValueError):
                self.data = None
        if not isinstance(self.data, dict):
            self.data = collect()
        return self.data


def collect_from(python: Path) -> dict[str, Any] | None:
    """The inventory of another interpreter: this file's source run by it as a script (the lab's
    probe does the same in a container), or None when it cannot be run."""
    import subprocess

    try:
        done = subprocess.run(
            [str(python), "-I", "-c", Path(__file__).read_text()],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        data = json.loads(done.stdout) if done.returncode == 0 else None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None
    return data if isinstance(data, dict) else None


def report(
    cache_root: Path | None, owners: frozenset[int] | None = None, python: Path | None = None
) -> Said:
    """Say the inventory in the job's log, unless this node's cache says it was said for this
    interpreter before (then nothing is computed). ``python``: the job runs on another base
    interpreter than this one (the venv's own, j2c-unpack's is another install): that one is
    inventoried, by running it, every time (its fingerprint would cost the same run)."""
    from j2c_server.unpack.cache.files import unsafe, write_json
    from j2c_server.unpack.log import say, warn

    if python is not None:
        started = time.monotonic()
        foreign = collect_from(python)
        if foreign is not None:
            foreign["seconds"] = round(time.monotonic() - started, 3)
            say(PHASE, json.dumps(foreign, separators=(",", ":")))
            return Said(foreign, None, None)
        warn("inventory", f"{python} could not say what it holds: this Python's said instead")
    kept: Path | None = None
    key: str | None = None
    if cache_root is not None:
        folder = cache_root / "inventory"
        try:
            folder.mkdir(mode=0o700, exist_ok=True)
            if unsafe(os.lstat(folder), owners or {os.geteuid()}, folder=True) is None:
                key = fingerprint()
                kept = folder / f"{key}.json"
        except OSError:
            kept = None
        if kept is not None and os.path.lexists(kept):
            return Said(None, kept, key)  # said before on this node: nothing on a warm start
    started = time.monotonic()
    data = collect()
    data["seconds"] = round(time.monotonic() - started, 3)
    say(PHASE, json.dumps(data, separators=(",", ":")))
    if kept is not None:
        try:
            write_json(kept, data)
        except OSError as exc:
            warn("inventory", f"not kept in the node cache: {exc.strerror or exc}")
            kept = None
    return Said(data, kept, key)


if __name__ == "__main__":
    print(json.dumps(collect(), separators=(",", ":")))
