"""The preflight plan: sizes, largest files, exclusions and warnings, computed without writing."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from j2c_server.core.errors import PackError
from j2c_server.pack import PackPlan, PackSpec, pack, preflight
from j2c_server.wire.manifest import LayerRole
from tests.support.projects import make_venv, write


def set_pyvenv_cfg(venv: Path, **values: str) -> None:
    cfg = venv / "pyvenv.cfg"
    text = cfg.read_text()
    for key, value in values.items():
        text = re.sub(rf"^{key} = .*$", f"{key} = {value}", text, flags=re.M)
    cfg.write_text(text)


def test_plan_counts_files_and_bytes_per_layer(spec: PackSpec, project: Path) -> None:
    plan = preflight(spec)
    code = next(layer for layer in plan.layers if layer.role == LayerRole.code)
    shipped = ["train.py", "analysis.ipynb", "mypkg/__init__.py", "mypkg/model.py"]
    shipped += ["mypkg/__main__.py", "data/train.csv", ".gitignore"]
    assert code.files == len(shipped)
    assert code.bytes == sum((project / rel).stat().st_size for rel in shipped)
    assert code.source_path == str(project)
    assert plan.total_bytes == sum(layer.bytes for layer in plan.layers)


def test_plan_lists_the_ten_largest_files(spec: PackSpec, project: Path) -> None:
    for i in range(12):
        write(project / "blobs" / f"b{i:02}.bin", "x" * (10_000 + i))
    code = next(layer for layer in preflight(spec).layers if layer.role == LayerRole.code)
    assert [item.path for item in code.largest] == [f"blobs/b{i:02}.bin" for i in range(11, 1, -1)]
    assert code.largest[0].bytes == 10_011


def test_plan_groups_exclusions_by_rule(spec: PackSpec) -> None:
    groups = {(g.layer, g.rule.value): g for g in preflight(spec).excluded}
    assert groups[(LayerRole.code, "secret")].count == 5
    assert groups[(LayerRole.code, ".gitignore")].paths == ["outputs/", "run.log"]


def test_plan_is_json_friendly(spec: PackSpec) -> None:
    plan = preflight(spec)
    assert PackPlan.model_validate_json(plan.model_dump_json()) == plan


def test_plan_reports_the_venv_python_version(spec: PackSpec) -> None:
    venv = preflight(spec).venv
    assert venv is not None
    assert venv.python_version == f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert venv.include_system_site_packages


def test_preflight_writes_nothing(spec: PackSpec, project: Path, venv: Path) -> None:
    def tree(root: Path) -> list[tuple[str, int]]:
        return sorted((str(p), p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file())

    before = tree(project), tree(venv)
    preflight(spec)
    assert (tree(project), tree(venv)) == before


def test_size_over_the_soft_limit_warns(project: Path, venv: Path) -> None:
    spec = PackSpec(code_path=project, call_path="train.py", venv_path=venv, soft_limit_bytes=1000)
    plan = preflight(spec)
    assert any(w.code == "soft_limit" for w in plan.warnings)
    assert plan.refused is None


def test_size_over_the_hard_limit_refuses(project: Path, venv: Path, cache: Path) -> None:
    spec = PackSpec(code_path=project, call_path="train.py", venv_path=venv, hard_limit_bytes=1000)
    assert preflight(spec).refused is not None
    with pytest.raises(PackError, match="over the hard limit") as caught:
        pack(spec, cache)
    assert caught.value.field in ("code_path", "venv_path")
    assert not cache.exists()


def test_venv_package_shadowing_the_base_interpreters_is_reported(
    project: Path, tmp_path: Path
) -> None:
    # The "base interpreter" here is another venv holding shadowpkg 2.0: a real interpreter
    # whose sys.path we control, standing in for the platform image's Python.
    base = make_venv(tmp_path / "base", packages={"shadowpkg": "2.0"}, system_site_packages=False)
    venv = make_venv(tmp_path / "venv", packages={"shadowpkg": "1.0", "ownpkg": "1.0"})
    python = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    set_pyvenv_cfg(venv, home=str(base / "bin"), executable=str(base / "bin" / python))
    plan = preflight(PackSpec(code_path=project, call_path="train.py", venv_path=venv))
    shadowed = [w for w in plan.warnings if w.code == "shadowed_package"]
    assert [w.path for w in shadowed] == ["shadowpkg"]
    assert "shadowpkg 1.0" in shadowed[0].message and "shadowpkg 2.0" in shadowed[0].message


def test_venv_made_for_another_python_is_reported(project: Path, tmp_path: Path) -> None:
    venv = make_venv(tmp_path / "venv")
    set_pyvenv_cfg(venv, version="3.9.18")
    plan = preflight(PackSpec(code_path=project, call_path="train.py", venv_path=venv))
    assert plan.venv is not None and plan.venv.python_version == "3.9"
    assert [w.code for w in plan.warnings if w.code == "python_version"] == ["python_version"]


def test_venv_without_system_site_packages_is_reported(project: Path, tmp_path: Path) -> None:
    venv = make_venv(tmp_path / "venv", system_site_packages=False)
    plan = preflight(PackSpec(code_path=project, call_path="train.py", venv_path=venv))
    assert any(w.code == "no_system_site_packages" for w in plan.warnings)


def test_venv_whose_base_interpreter_is_gone_is_reported(project: Path, tmp_path: Path) -> None:
    venv = make_venv(tmp_path / "venv")
    set_pyvenv_cfg(venv, home=str(tmp_path / "gone"), executable=str(tmp_path / "gone" / "py"))
    plan = preflight(PackSpec(code_path=project, call_path="train.py", venv_path=venv))
    assert any(w.code == "base_interpreter_missing" for w in plan.warnings)
