"""The venv's packages that shadow the image's own, as j2c-unpack's log names them (the real
run in a container is in tests/schedulers/test_container_e2e.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from j2c_server.unpack.shadows import base_site_dirs, shadowed


def _dist(folder: Path, name: str, version: str) -> None:
    (folder / f"{name}-{version}.dist-info").mkdir(parents=True)


def _venv(root: Path, *, system_site: bool) -> Path:
    site = root / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    flag = "true" if system_site else "false"
    (root / "pyvenv.cfg").write_text(f"home = /usr/bin\ninclude-system-site-packages = {flag}\n")
    return site


def test_a_venv_copy_of_an_image_package_is_named_with_both_versions(tmp_path: Path) -> None:
    base = tmp_path / "dist-packages"
    _dist(base, "numpy", "1.24.2")
    _dist(base, "Pillow", "9.4.0")
    _dist(base, "pip", "23.0")
    site = _venv(tmp_path / "venv", system_site=True)
    _dist(site, "numpy", "2.1.0")
    _dist(site, "pillow", "10.0")  # the same project under another spelling
    _dist(site, "pip", "24.0")  # every venv has its own pip: not news
    _dist(site, "adatool", "1.0")
    assert shadowed(tmp_path / "venv", [base]) == [
        ("numpy", "2.1.0", "1.24.2"),
        ("pillow", "10.0", "9.4.0"),
    ]


def test_a_venv_without_system_site_packages_shadows_nothing(tmp_path: Path) -> None:
    base = tmp_path / "dist-packages"
    _dist(base, "numpy", "1.24.2")
    _dist(_venv(tmp_path / "venv", system_site=False), "numpy", "2.1.0")
    assert shadowed(tmp_path / "venv", [base]) == []


def test_the_base_dirs_are_the_interpreters_not_a_venvs() -> None:
    # The tests run in a venv: its own site-packages is not the image's.
    assert sys.prefix != sys.base_prefix
    dirs = base_site_dirs()
    assert dirs and all(Path(sys.base_prefix) in path.parents for path in dirs)
    assert not [path for path in dirs if Path(sys.prefix) in path.parents]
