"""docs/architecture.md's module table names every module of j2c_server, and only real ones.

A row's first cell names modules by path under ``j2c_server/`` (``jobs/drive/lease.py``); a bare
name after a path in the same cell is in that path's folder (``job.py`` after
``schedulers/slurm/backend.py``); a folder (``usage/``) covers every module in it.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "j2c_server"
DOC = ROOT / "docs" / "architecture.md"
NOT_MODULES = {"__init__.py", "_version.py"}


def _named() -> tuple[set[str], set[str]]:
    files: set[str] = set()
    folders: set[str] = set()
    text = DOC.read_text()
    table = text.split("## Modules", 1)[1].split("\n## ", 1)[0]
    for line in table.splitlines():
        if not line.startswith("| `"):
            continue
        first_cell = line.split("|")[1]
        folder = ""
        for name in re.findall(r"`([^`]+)`", first_cell):
            if name.startswith(("src/", "scripts/")):
                continue  # outside the package
            if name.endswith("/"):
                folders.add(name)
                continue
            if "/" in name:
                folder = name.rsplit("/", 1)[0] + "/"
            elif "*" not in name:
                name = folder + name
            files.add(name)
    return files, folders


def _modules() -> set[str]:
    return {
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if path.name != "_version.py" and "labextension" not in path.parts
    }


def test_every_module_is_on_the_map():
    files, folders = _named()
    patterns = [re.compile(re.escape(name).replace(r"\*", "[^/]*") + "$") for name in files]
    missing = sorted(
        module
        for module in _modules()
        if not module.endswith("__init__.py")
        and not any(module.startswith(folder) for folder in folders)
        and not any(pattern.match(module) for pattern in patterns)
    )
    assert not missing, f"docs/architecture.md's module table does not name: {missing}"


def test_the_map_names_only_modules_that_exist():
    files, folders = _named()
    modules = _modules()
    gone = sorted(name for name in files if "*" not in name and name not in modules)
    gone += sorted(folder for folder in folders if not (PACKAGE / folder).is_dir())
    assert not gone, f"docs/architecture.md names modules that are not there: {gone}"


def test_the_top_of_the_package_holds_folders_and_a_handful_of_modules():
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in NOT_MODULES)
    assert loose == ["config.py"], loose
