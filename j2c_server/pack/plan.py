"""Validation and the preflight plan: everything ``pack`` checks before it writes a byte.

``prepare`` validates the spec (``PackError`` naming the field), scans both layers and builds
the :class:`PackPlan`; ``preflight`` returns just the plan, ``pack`` goes on to write from the
same scan.
"""

from __future__ import annotations

import heapq
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import PackError
from ..models import LayerRole
from .entry import ResolvedEntry, resolve_entry
from .ignore import CodeRules
from .models import (
    ExcludedGroup,
    ExcludeRule,
    LayerPlan,
    PackPlan,
    PackSpec,
    PackWarning,
    PathSize,
)
from .scan import ScannedLayer, scan_code, scan_venv
from .venv import Venv, open_venv, path_entries, shadowed_packages

MAX_LISTED = 100
LARGEST = 10
_FIELD = {LayerRole.code: "code_path", LayerRole.venv: "venv_path"}


@dataclass
class Prepared:
    spec: PackSpec
    code_root: Path
    venv: Venv | None
    entry: ResolvedEntry
    layers: list[ScannedLayer]
    plan: PackPlan
    scanned_ns: int = 0  # when the walk began: files newer than this are racy for the cache


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _code_root(spec: PackSpec) -> Path:
    root = Path(os.path.abspath(spec.code_path.expanduser()))
    if not root.exists():
        raise PackError(f"code path {spec.code_path} does not exist", field="code_path")
    if not root.is_dir():
        raise PackError(f"code path {spec.code_path} is not a directory", field="code_path")
    return root


def _includes(spec: PackSpec, root: Path) -> list[str]:
    """Project-relative, '/'-separated include paths; each must exist inside the project."""
    out: list[str] = []
    for item in spec.includes:
        given = Path(item).expanduser()
        path = Path(os.path.normpath(given if given.is_absolute() else root / given))
        if not _inside(str(path), str(root)) or path == root:
            raise PackError(f"include {item} is not a path inside {root}", field="includes")
        if not os.path.lexists(path):
            raise PackError(f"include {item} does not exist in {root}", field="includes")
        out.append(path.relative_to(root).as_posix())
    return out


def _check_path_entries(venv: Venv, code_root: Path) -> tuple[list[Path], list[PackWarning]]:
    """Editable installs must live in the project (they ship with it); returns the project
    folders they add to ``sys.path`` and warnings for other ``.pth`` paths that will not ship."""
    real_code = os.path.realpath(code_root)
    real_venv = os.path.realpath(venv.root)
    roots: list[Path] = []
    warnings: list[PackWarning] = []
    for item in path_entries(venv):
        real = os.path.realpath(item.path)
        if _inside(real, real_code):
            roots.append(Path(real))
        elif item.editable:
            name = f"'{item.project}'" if item.project else f"from {item.source}"
            raise PackError(
                f"the venv has an editable install {name} pointing to {item.path}, outside the "
                f"code path {code_root}: it would not exist in the job",
                field="venv_path",
                hint="install it normally (pip install <path>) or move it into the project",
            )
        elif not _inside(real, real_venv):
            warnings.append(
                PackWarning(
                    code="pth_outside",
                    message=f"{item.source} adds {item.path} to sys.path; it is not shipped and "
                    "must exist in the job's image",
                    path=str(item.path),
                )
            )
    return roots, warnings


def _venv_warnings(venv: Venv) -> list[PackWarning]:
    warnings: list[PackWarning] = []
    version = venv.info.python_version
    if not venv.info.include_system_site_packages:
        warnings.append(
            PackWarning(
                code="no_system_site_packages",
                message="the venv was created without --system-site-packages: the image's "
                "packages (e.g. torch with CUDA) will not be visible to the job",
            )
        )
    if venv.base is None:
        warnings.append(
            PackWarning(
                code="base_interpreter_missing",
                message=f"the venv's base interpreter (home = {venv.info.home}) cannot run here: "
                "shadowed packages were not checked",
            )
        )
        return warnings
    if venv.base.version != version:
        warnings.append(
            PackWarning(
                code="python_version",
                message=f"the venv was made for Python {version} but its base interpreter is "
                f"Python {venv.base.version}: the venv's packages will not load",
            )
        )
    for name, ours, theirs in shadowed_packages(venv):
        warnings.append(
            PackWarning(
                code="shadowed_package",
                message=f"the venv's {name} {ours} shadows the base interpreter's {name} {theirs}",
                path=name,
            )
        )
    return warnings


def _scan_warnings(layers: list[ScannedLayer]) -> list[PackWarning]:
    messages = {
        ExcludeRule.secret: (
            "secret",
            "left out as secrets (ship one with includes): ",
        ),
        ExcludeRule.symlink_escape: ("symlink_escape", "symlinks pointing outside, not followed: "),
        ExcludeRule.special_file: ("special_file", "sockets, FIFOs or devices skipped: "),
        ExcludeRule.bad_name: ("bad_name", "names that are not valid UTF-8 skipped: "),
    }
    warnings = []
    for layer in layers:
        for rule, (code, text) in messages.items():
            paths = sorted(layer.excluded.get(rule, []))
            if paths:
                shown = ", ".join(paths[:10]) + (" ..." if len(paths) > 10 else "")
                warnings.append(
                    PackWarning(code=code, message=f"{layer.role.value}: {text}{shown}")
                )
    return warnings


def _check_unreadable(layers: list[ScannedLayer]) -> None:
    for layer in layers:
        if layer.unreadable:
            shown = ", ".join(layer.unreadable[:5]) + (" ..." if len(layer.unreadable) > 5 else "")
            raise PackError(
                f"cannot read {len(layer.unreadable)} path(s) in {layer.root}: {shown}",
                field=_FIELD[layer.role],
                hint="fix their permissions or exclude them",
            )


def _check_entry_ships(entry: ResolvedEntry, code: ScannedLayer) -> None:
    if entry.code_file is None or any(e.rel == entry.code_file for e in code.entries):
        return
    for rule, paths in code.excluded.items():
        for path in paths:
            stem = path.split(" -> ")[0]
            if stem == entry.code_file or entry.code_file.startswith(stem.rstrip("/") + "/"):
                raise PackError(
                    f"the entry point {entry.code_file} is excluded by rule '{rule.value}' "
                    f"({path})",
                    field="call_path",
                    hint="add it to includes, or change the ignore rule",
                )
    raise PackError(f"the entry point {entry.code_file} is not packed", field="call_path")


def _layer_plan(layer: ScannedLayer) -> LayerPlan:
    files = layer.files
    largest = heapq.nlargest(LARGEST, files, key=lambda e: (e.size, e.rel))
    return LayerPlan(
        role=layer.role,
        source_path=str(layer.root),
        files=len(files),
        entries=len(layer.entries),
        bytes=sum(e.size for e in files),
        largest=[PathSize(path=e.rel, bytes=e.size) for e in largest],
    )


def _excluded_groups(layers: list[ScannedLayer]) -> list[ExcludedGroup]:
    groups = []
    for layer in layers:
        for rule in ExcludeRule:
            paths = sorted(layer.excluded.get(rule, []))
            if paths:
                groups.append(
                    ExcludedGroup(
                        layer=layer.role, rule=rule, count=len(paths), paths=paths[:MAX_LISTED]
                    )
                )
    return groups


def prepare(spec: PackSpec) -> Prepared:
    """Validate, scan and plan; raises PackError naming the field at fault."""
    scanned_ns = time.time_ns()
    code_root = _code_root(spec)
    venv = open_venv(spec.venv_path.expanduser()) if spec.venv_path is not None else None
    includes = _includes(spec, code_root)
    warnings: list[PackWarning] = []
    module_roots: list[Path] = []
    if venv is not None:
        project_roots, pth_warnings = _check_path_entries(venv, code_root)
        warnings += pth_warnings
        if venv.site_packages is not None:
            module_roots.append(venv.site_packages)
        module_roots += project_roots
        module_roots += [Path(p) for p in venv.base.paths] if venv.base else []
    entry = resolve_entry(spec.call_path, code_root, module_roots)

    code = scan_code(code_root, CodeRules(spec.excludes, includes), venv.root if venv else None)
    layers = [code] + ([scan_venv(venv.root)] if venv is not None else [])
    _check_unreadable(layers)
    _check_entry_ships(entry, code)

    warnings += _scan_warnings(layers)
    if venv is not None:
        warnings += _venv_warnings(venv)
    layer_plans = [_layer_plan(layer) for layer in layers]
    total = sum(plan.bytes for plan in layer_plans)
    refused = None
    if total > spec.hard_limit_bytes:
        refused = (
            f"the layers hold {total / 1e6:.0f} MB, over the hard limit of "
            f"{spec.hard_limit_bytes / 1e6:.0f} MB"
        )
    elif total > spec.soft_limit_bytes:
        warnings.append(
            PackWarning(
                code="soft_limit",
                message=f"the layers hold {total / 1e6:.0f} MB, over the soft limit of "
                f"{spec.soft_limit_bytes / 1e6:.0f} MB; see the largest files",
            )
        )
    plan = PackPlan(
        layers=layer_plans,
        entry=entry.entry,
        venv=venv.info if venv else None,
        excluded=_excluded_groups(layers),
        warnings=warnings,
        total_bytes=total,
        soft_limit_bytes=spec.soft_limit_bytes,
        hard_limit_bytes=spec.hard_limit_bytes,
        refused=refused,
    )
    return Prepared(spec, code_root, venv, entry, layers, plan, scanned_ns)


def preflight(spec: PackSpec) -> PackPlan:
    """What ``pack`` would ship, leave out and warn about; writes nothing."""
    return prepare(spec).plan
