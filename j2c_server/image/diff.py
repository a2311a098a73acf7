"""A job's needs against its target's inventory: the differences, as :class:`ImageReport` parts.

What the job needs is the venv (it ships) plus the lab-base distributions that any of them
requires (``Requires-Dist``, transitively, markers evaluated for the *image's* Python and
platform) plus those the project imports. Against the image:

- missing: needed base distributions the image does not have;
- versions: needed ones it has at another version, with each requirement on them that the
  image's version fails ("scipy 1.17.1 needs numpy>=1.25.2");
- wheels: the venv's compiled wheels whose tags the image cannot load (glibc too old, another
  machine, musl, another CPython ABI);
- shadows: venv distributions that hide an image distribution other image distributions need.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from j2c_server.image.needs import LabDist, ProjectImports
from j2c_server.unpack.wheels import Runtime
from j2c_server.unpack.wheels import wheel_problem as tag_problem
from j2c_server.wire.image import (
    BrokenRequirement,
    ImageInventory,
    MissingDist,
    ShadowRisk,
    UnprovidedImport,
    VersionDifference,
    WheelMismatch,
)

TOOLING = frozenset({"pip", "setuptools", "wheel", "distribute"})
REASONS_SHOWN = 3


@functools.lru_cache(maxsize=8192)
def _requirement(text: str) -> Requirement | None:
    try:
        return Requirement(text)
    except InvalidRequirement:
        return None


def marker_env(inventory: ImageInventory) -> dict[str, str]:
    """PEP 508 marker values of the image's interpreter (what pip there would evaluate)."""
    env: dict[str, str] = {key: str(value) for key, value in default_environment().items()}
    full = inventory.python.version
    implementation = inventory.python.implementation
    system = inventory.platform.system
    env.update(
        python_version=inventory.python.minor,
        python_full_version=full,
        implementation_name=implementation,
        implementation_version=full,
        platform_python_implementation={"cpython": "CPython", "pypy": "PyPy"}.get(
            implementation, implementation
        ),
        platform_machine=inventory.platform.machine,
        platform_system=system,
        sys_platform={"Linux": "linux", "Darwin": "darwin", "Windows": "win32"}.get(
            system, system.lower()
        ),
        os_name="nt" if system == "Windows" else "posix",
    )
    return env


def requirements(
    requires: tuple[str, ...] | list[str], env: dict[str, str], extras: frozenset[str] = frozenset()
) -> list[Requirement]:
    """The requirements whose markers hold in ``env`` (for no extra, or one of ``extras``)."""
    kept = []
    for text in requires:
        req = _requirement(text)
        if req is None:
            continue
        if req.marker is not None and not any(
            req.marker.evaluate({**env, "extra": extra}) for extra in ("", *extras)
        ):
            continue
        kept.append(req)
    return kept


def _reasons(items: list[str]) -> list[str]:
    unique = list(dict.fromkeys(items))
    if len(unique) > REASONS_SHOWN:
        return [*unique[:REASONS_SHOWN], f"{len(unique) - REASONS_SHOWN} more"]
    return unique


def needed_from_base(
    venv: dict[str, LabDist],
    base: dict[str, LabDist],
    imports: ProjectImports,
    env: dict[str, str],
) -> dict[str, list[str]]:
    """Base distribution key → why the job needs it (the dists requiring it, importing files)."""
    needed: dict[str, list[str]] = {}
    todo: list[tuple[LabDist, frozenset[str]]] = [(dist, frozenset()) for dist in venv.values()]
    venv_modules = {module for dist in venv.values() for module in dist.top_level}
    provider: dict[str, str] = {}
    for dist in base.values():
        for module in dist.top_level:
            provider.setdefault(module, dist.key)
    for module, files in sorted(imports.by_module.items()):
        key = provider.get(module)
        if key is None or module in venv_modules or key in venv:
            continue
        more = f" and {len(files) - 1} more" if len(files) > 1 else ""
        needed.setdefault(key, []).append(f"imported by {files[0]}{more}")
        todo.append((base[key], frozenset()))
    done: set[tuple[str, frozenset[str]]] = set()
    while todo:
        dist, extras = todo.pop()
        if (dist.key, extras) in done:
            continue
        done.add((dist.key, extras))
        for req in requirements(dist.requires, env, extras):
            key = _key(req.name)
            if key in venv or key not in base:
                continue  # shipped with the venv, or not the lab base's business
            needed.setdefault(key, []).append(dist.label)
            todo.append((base[key], frozenset(req.extras)))
    return needed


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _holds(req: Requirement, version: str) -> bool:
    try:
        return req.specifier.contains(Version(version), prereleases=True)
    except InvalidVersion:
        return True  # a version packaging cannot read is not ours to judge


@dataclass
class Differences:
    missing: list[MissingDist]
    versions: list[VersionDifference]
    wheels: list[WheelMismatch]
    shadows: list[ShadowRisk]


def compare(
    venv: dict[str, LabDist],
    base: dict[str, LabDist],
    imports: ProjectImports,
    inventory: ImageInventory,
    lab_libc: str | None,
) -> Differences:
    env = marker_env(inventory)
    image = {_key(dist.name): dist for dist in inventory.distributions}
    needed = needed_from_base(venv, base, imports, env)
    users = [*venv.values(), *(base[key] for key in needed)]
    missing: list[MissingDist] = []
    versions: list[VersionDifference] = []
    for key in sorted(needed):
        dist = base[key]
        theirs = image.get(key)
        if theirs is None:
            missing.append(
                MissingDist(
                    name=dist.name,
                    lab_version=dist.version,
                    bytes=dist.size(),
                    needed_by=_reasons(needed[key]),
                )
            )
        elif theirs.version != dist.version:
            broken = [
                BrokenRequirement(by=user.label, requirement=str(req))
                for user in users
                for req in requirements(user.requires, env)
                if _key(req.name) == key and not _holds(req, theirs.version)
            ]
            versions.append(
                VersionDifference(
                    name=dist.name,
                    lab_version=dist.version,
                    image_version=theirs.version,
                    broken=broken,
                )
            )
    wheels = [
        WheelMismatch(name=dist.name, version=dist.version, tags=list(dist.tags), reason=why)
        for dist in sorted(venv.values(), key=lambda d: d.key)
        if dist.tags and (why := wheel_problem(dist.tags, inventory, lab_libc)) is not None
    ]
    shadows = []
    for key, ours in sorted(venv.items()):
        theirs = image.get(key)
        if theirs is None or key in TOOLING:
            continue
        dependents = [
            (dist, req)
            for dist in inventory.distributions
            for req in requirements(dist.requires, env)
            if _key(req.name) == key
        ]
        if dependents:
            shadows.append(
                ShadowRisk(
                    name=ours.name,
                    venv_version=ours.version,
                    image_version=theirs.version,
                    required_by=_reasons([f"{d.name} {d.version}" for d, _ in dependents]),
                    broken=[
                        BrokenRequirement(by=f"{d.name} {d.version}", requirement=str(req))
                        for d, req in dependents
                        if not _holds(req, ours.version)
                    ],
                )
            )
    return Differences(missing, versions, wheels, shadows)


# ---------------------------------------------------------------------- imports nothing provides


def unprovided_imports(
    reachable: dict[str, list[str]] | None,
    venv: dict[str, LabDist],
    base: dict[str, LabDist],
    folders: list[Path],
    inventory: ImageInventory,
) -> list[UnprovidedImport]:
    """The entry's imports that neither the venv, the lab's base nor the image provides (by
    their distributions' import names, and by a module or package of that name in the venv's
    or the base's site folders: Debian's packages, say, without metadata)."""
    provided = {
        module
        for dists in (venv.values(), base.values(), inventory.distributions)
        for dist in dists
        for module in dist.top_level
    }
    found = []
    for module, files in sorted((reachable or {}).items()):
        if module in provided or any(_in_folder(folder, module) for folder in folders):
            continue
        found.append(UnprovidedImport(name=module, imported_by=_reasons(files)))
    return found


def _in_folder(folder: Path, module: str) -> bool:
    if (folder / module).is_dir() or (folder / f"{module}.py").is_file():
        return True
    return any(folder.glob(f"{module}.*.so"))


# ---------------------------------------------------------------------- wheel tags


def wheel_problem(
    tags: tuple[str, ...], inventory: ImageInventory, lab_libc: str | None
) -> str | None:
    """Why none of a wheel's tags loads in the image; None when one does."""
    runtime = Runtime(
        python_version=inventory.python.version,
        implementation=inventory.python.implementation,
        machine=inventory.platform.machine,
        libc=inventory.platform.libc,
        libc_version=inventory.platform.libc_version,
    )
    return tag_problem(tags, runtime, lab_libc)


def lab_glibc() -> str | None:
    """This machine's glibc version (the lab's), for wheels built here."""
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        return None
    return text.partition(" ")[2] or None
