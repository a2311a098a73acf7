"""Whether a compiled wheel loads on a Python and platform, and why not, in words.

The lab judges the venv's wheels against an image's inventory (``image/diff.py``); a job's
``j2c-unpack`` judges the same tags against the interpreter it runs on (``needs.py``). Which tags
a runtime accepts is ``packaging``'s (its tag parsing and the CPython/compatible tag orders);
this module builds that runtime's platform list from an inventory (``packaging`` reads only the
machine it runs on) and, for a wheel that matches none, says the first reason in the user's
words: another Python or ABI, another machine, musl or an older glibc.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from packaging.tags import Tag, compatible_tags, cpython_tags, generic_tags, parse_tag

# PEP 600's aliases for the first manylinux tags, by the glibc they mean.
_LEGACY = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
_PEP600 = re.compile(r"^(manylinux|musllinux)_(\d+)_(\d+)_(.+)$")


@dataclass(frozen=True)
class Runtime:
    """The Python and platform a wheel would load on."""

    python_version: str  # "3.11.2"
    implementation: str  # sys.implementation.name: "cpython"
    machine: str  # "x86_64"
    libc: str  # "glibc", "musl", "unknown"
    libc_version: str  # "2.36"

    @property
    def python_minor(self) -> tuple[int, int]:
        major, _, rest = self.python_version.partition(".")
        return int(major), int(rest.partition(".")[0] or 0)


def _version(text: str) -> tuple[int, int]:
    major, minor, *_ = [*(int(part) for part in re.findall(r"\d+", text)[:2]), 0, 0]
    return major, minor


def platforms(runtime: Runtime) -> list[str]:
    """The platform tags ``runtime`` loads, most specific first."""
    arch = runtime.machine
    major, minor = _version(runtime.libc_version)
    found: list[str] = []
    if runtime.libc == "glibc":
        found += [f"manylinux_{major}_{m}_{arch}" for m in range(minor, -1, -1)]
        found += [
            f"{alias}_{arch}" for alias, wanted in _LEGACY.items() if wanted <= (major, minor)
        ]
    elif runtime.libc == "musl":
        found += [f"musllinux_{major}_{m}_{arch}" for m in range(minor, -1, -1)]
    return [*found, f"linux_{arch}"]


@cache
def supported(runtime: Runtime) -> frozenset[Tag]:
    """Every tag a wheel may carry to load on ``runtime`` (``packaging``'s orders)."""
    version = runtime.python_minor
    plats = platforms(runtime)
    if runtime.implementation == "cpython":
        tags = set(cpython_tags(version, platforms=plats))
        interpreter = f"cp{version[0]}{version[1]}"
    else:
        interpreter = f"{runtime.implementation[:2]}{version[0]}{version[1]}"
        tags = set(generic_tags(interpreter, platforms=plats))
    tags.update(compatible_tags(version, interpreter, plats))
    return frozenset(tags)


def wheel_problem(tags: tuple[str, ...], runtime: Runtime, lab_libc: str | None) -> str | None:
    """Why none of a wheel's tags (``WHEEL``'s ``Tag:`` lines, compressed sets allowed)
    loads on ``runtime``; None when one does. ``lab_libc``: the glibc the lab built a
    ``linux_*`` wheel against (such a wheel may need symbols an older glibc lacks)."""
    wheel = [
        tag for text in tags if text.count("-") == 2 for tag in sorted(parse_tag(text), key=str)
    ]
    loads = [tag for tag in wheel if tag in supported(runtime)]
    if loads:
        local = all(tag.platform.startswith("linux_") for tag in loads)
        older = runtime.libc == "glibc" and _version(runtime.libc_version) < _version(
            lab_libc or ""
        )
        if local and lab_libc and older:
            return (
                f"built here against glibc {lab_libc} ({loads[0].platform}); the image has "
                f"glibc {runtime.libc_version}"
            )
        return None
    reasons = [_python_problem(tag, runtime) or _platform_problem(tag, runtime) for tag in wheel]
    return next((why for why in reasons if why), None) if wheel else None


def _python_problem(tag: Tag, runtime: Runtime) -> str | None:
    pythons = {(t.interpreter, t.abi) for t in supported(runtime)}
    if (tag.interpreter, tag.abi) in pythons:
        return None
    built = re.match(r"^cp(\d)(\d+)$", tag.interpreter)
    if built is None:
        return f"built for {tag.interpreter}; the image runs {runtime.implementation}"
    if runtime.implementation != "cpython":
        return f"built for CPython; the image runs {runtime.implementation}"
    wanted = f"{built.group(1)}.{built.group(2)}"
    return (
        f"built for CPython {wanted} ({tag.interpreter}-{tag.abi}); the image has "
        f"{runtime.python_version}"
    )


def _platform_problem(tag: Tag, runtime: Runtime) -> str | None:
    plat = tag.platform
    for alias, (major, minor) in _LEGACY.items():
        if plat.startswith(alias + "_"):
            plat = f"manylinux_{major}_{minor}_{plat[len(alias) + 1 :]}"
    match = _PEP600.match(plat)
    arch = match.group(4) if match else plat.removeprefix("linux_")
    if not (match or plat.startswith("linux_")):
        return f"built for another platform ({tag.platform})"
    if arch != runtime.machine:
        where = runtime.machine or "an unknown machine"
        return f"built for {arch} ({tag.platform}); the image runs on {where}"
    if match is None:
        return None
    libc, version = runtime.libc, runtime.libc_version
    if match.group(1) == "musllinux":
        return f"built for musl libc ({tag.platform}); the image has {libc} {version}"
    wanted = f"{match.group(2)}.{match.group(3)}"
    return f"needs glibc {wanted} ({tag.platform}); the image has {libc} {version}"
