"""Fake installed distributions (dist-info folders) and inventories for the image check tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def dist(
    site: Path,
    name: str,
    version: str,
    *,
    requires: tuple[str, ...] = (),
    modules: tuple[str, ...] = (),
    tags: tuple[str, ...] = (),
    size: int = 1000,
) -> Path:
    """A ``<name>-<version>.dist-info`` in ``site`` with METADATA, RECORD (one module file
    per import name, ``size`` bytes each) and, for ``tags``, a non-purelib WHEEL."""
    folder = site / f"{name.replace('-', '_')}-{version}.dist-info"
    folder.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Dist: {req}" for req in requires]
    (folder / "METADATA").write_text("\n".join(lines) + "\n\n")
    record = []
    for module in modules or (name.replace("-", "_"),):
        (site / module).mkdir(exist_ok=True)
        (site / module / "__init__.py").write_bytes(b"#" * size)
        record.append(f"{module}/__init__.py,sha256=x,{size}")
    record.append(f"{folder.name}/METADATA,,")
    (folder / "RECORD").write_text("\n".join(record) + "\n")
    if tags:
        wheel = ["Wheel-Version: 1.0", "Root-Is-Purelib: false", *(f"Tag: {t}" for t in tags)]
        (folder / "WHEEL").write_text("\n".join(wheel) + "\n")
    return folder


def inventory(
    dists: dict[str, str] | None = None,
    *,
    python: str = "3.11.2",
    glibc: str = "2.36",
    machine: str = "x86_64",
    requires: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    """An inventory as ``unpack/inventory.py`` prints it."""
    requires = requires or {}
    return {
        "format": 1,
        "created_at": 1.0,
        "j2c_version": "0.1.0",
        "python": {
            "version": python,
            "implementation": "cpython",
            "cache_tag": "cpython-" + "".join(python.split(".")[:2]),
            "soabi": f"cpython-{''.join(python.split('.')[:2])}-{machine}-linux-gnu",
        },
        "platform": {"system": "Linux", "machine": machine, "libc": "glibc", "libc_version": glibc},
        "distributions": [
            {
                "name": name,
                "version": version,
                "top_level": [name],
                "requires": requires.get(name, []),
            }
            for name, version in (dists or {}).items()
        ],
    }
