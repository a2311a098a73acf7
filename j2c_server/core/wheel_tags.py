"""Whether a wheel's tags load on a given Python and platform, standard library only.

The lab judges the venv's compiled wheels against an image's inventory (image/diff.py); a job's
``j2c-unpack`` judges the same tags against the interpreter it runs on (unpack/needs.py), where
no ``packaging`` may be installed. ``WHEEL``'s ``Tag:`` lines are ``interp-abi-platform``, each
part possibly dotted (compressed tag sets).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_MANYLINUX_OLD = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
_GLIBC_TAG = re.compile(r"^(manylinux|musllinux)_(\d+)_(\d+)_(.+)$")


@dataclass(frozen=True)
class Runtime:
    """The Python and platform a wheel would load on."""

    python_version: str  # "3.11.2"
    implementation: str  # sys.implementation.name: "cpython"
    machine: str  # "x86_64"
    libc: str  # "glibc", "musl", "unknown"
    libc_version: str  # "2.36"

    @property
    def python_minor(self) -> str:
        return ".".join(self.python_version.split(".")[:2])


def _glibc(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:2]) or (0,)


def _cpython(tag: str) -> tuple[int, int] | None:
    match = re.match(r"^cp(\d)(\d+)", tag)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _python_problem(interp: str, abi: str, runtime: Runtime) -> str | None:
    major, _, minor = runtime.python_minor.partition(".")
    image = (int(major), int(minor or 0))
    wanted = _cpython(interp)
    if not interp.startswith(("py", "cp")):
        return f"built for {interp}; the image runs {runtime.implementation}"
    if wanted is None:
        return None  # py3, py2.py3: any Python
    if runtime.implementation != "cpython":
        return f"built for CPython; the image runs {runtime.implementation}"
    if abi == "abi3":
        ok = wanted <= image
    elif abi == "none":
        ok = wanted[0] == image[0] and wanted <= image
    else:
        ok = wanted == image
    if ok:
        return None
    built = f"{wanted[0]}.{wanted[1]} ({interp}-{abi})"
    return f"built for CPython {built}; the image has {runtime.python_version}"


def _platform_problem(plat: str, runtime: Runtime, lab_libc: str | None) -> str | None:
    machine = runtime.machine
    libc, version = runtime.libc, runtime.libc_version
    if plat == "any":
        return None
    for old, glibc in _MANYLINUX_OLD.items():
        if plat.startswith(old + "_"):
            plat = f"manylinux_{glibc[0]}_{glibc[1]}_{plat[len(old) + 1 :]}"
    match = _GLIBC_TAG.match(plat)
    if match is not None:
        kind, wanted, arch = (
            match.group(1),
            (int(match.group(2)), int(match.group(3))),
            match.group(4),
        )
        if arch != machine:
            return f"built for {arch} ({plat}); the image runs on {machine or 'an unknown machine'}"
        if kind == "musllinux":
            return f"built for musl libc ({plat}); the image has {libc} {version}"
        if libc != "glibc":
            return f"needs glibc {wanted[0]}.{wanted[1]} ({plat}); the image has {libc} {version}"
        if _glibc(version) < wanted:
            return f"needs glibc {wanted[0]}.{wanted[1]} ({plat}); the image has glibc {version}"
        return None
    if plat.startswith("linux_"):
        arch = plat[len("linux_") :]
        if arch != machine:
            return f"built for {arch} ({plat}); the image runs on {machine}"
        if lab_libc and libc == "glibc" and _glibc(version) < _glibc(lab_libc):
            return f"built here against glibc {lab_libc} ({plat}); the image has glibc {version}"
        return None
    return f"built for another platform ({plat})"


def wheel_problem(tags: tuple[str, ...], runtime: Runtime, lab_libc: str | None) -> str | None:
    """Why none of a wheel's tags loads in the image; None when one does."""
    problems: list[str] = []
    for tag in tags:
        parts = tag.split("-")
        if len(parts) != 3:
            continue
        for interp in parts[0].split("."):
            for abi in parts[1].split("."):
                for plat in parts[2].split("."):
                    why = _python_problem(interp, abi, runtime) or _platform_problem(
                        plat, runtime, lab_libc
                    )
                    if why is None:
                        return None
                    problems.append(why)
    return problems[0] if problems else None
