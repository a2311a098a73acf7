"""The compute side is one declared set: what ``j2c-unpack`` imports, followed through the whole
import graph (imports inside functions included), stays within the packages ``[tool.j2c]
compute-packages`` names and the distributions of the ``unpack`` extra (plus the standard
library): what ``scripts/platform-image.sh`` puts in an image, and nothing of the lab's."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import grimp
import tomllib

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# Distribution names whose import name differs.
IMPORT_NAMES = {"pyyaml": "yaml"}


def _reached() -> set[str]:
    graph = grimp.build_graph(
        "j2c_server", include_external_packages=True, exclude_type_checking_imports=True
    )
    todo, seen = ["j2c_server.unpack.__main__"], set()
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph.find_modules_directly_imported_by(module))
    return seen


def _names(requirements: list[str]) -> set[str]:
    names = {re.split(r"[<>=!~\[ ;]", req, maxsplit=1)[0].lower() for req in requirements}
    return {IMPORT_NAMES.get(name, name) for name in names}


def test_j2c_unpack_reaches_only_the_compute_packages_and_the_unpack_extra() -> None:
    reached = _reached()
    compute = set(PYPROJECT["tool"]["j2c"]["compute-packages"])
    own = {m.split(".")[1] for m in reached if m.startswith("j2c_server.") and m.count(".") >= 1}
    assert own - {"_version"} <= compute, own - compute
    external = {m.split(".")[0] for m in reached if not m.startswith("j2c_server")}
    third_party = external - set(sys.stdlib_module_names)
    extra = _names(PYPROJECT["project"]["optional-dependencies"]["unpack"])
    assert third_party == extra, (third_party, extra)


def test_the_lab_gets_the_compute_side_through_the_extra_not_a_second_list() -> None:
    base = PYPROJECT["project"]["dependencies"]
    assert "j2c[unpack]" in [req.split(" ")[0] for req in base]
    assert not _names(base) & _names(PYPROJECT["project"]["optional-dependencies"]["unpack"])


def test_the_platform_image_installs_the_declared_sets() -> None:
    script = (ROOT / "scripts" / "platform-image.sh").read_text()
    assert "optional-dependencies" in script and "compute-packages" in script
    assert "pydantic zstandard" not in script  # no hand list
