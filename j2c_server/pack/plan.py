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

from j2c_server.core.errors import PackError
from j2c_server.pack.entry import ResolvedEntry, resolve_entry
from j2c_server.pack.ignore import CodeRules, VenvRules
from j2c_server.pack.models import (
    ExcludedGroup,
    ExcludeRule,
    LayerPlan,
    PackPlan,
    PackSpec,
    PackWarning,
    PathSize,
)
from j2c_server.pack.scan import FILE, Entry, ScannedLayer, scan_code, scan_venv
from j2c_server.pack.secrets import READ_BUDGET, VerdictCache
from j2c_server.pack.venv import Venv, open_venv, path_entries, shadowed_packages
from j2c_server.pack.venv_scans import VenvScans
from j2c_server.wire.manifest import LayerRole

MAX_LISTED = 100
LARGEST = 10
# Big files this large are probably data: the plan suggests reading them from storage instead.
DATA_HINT_BYTES = 64 * 1024 * 1024
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


def _includes(spec: PackSpec, root: Path, venv_root: Path | None) -> tuple[list[str], list[str]]:
    """Include paths relative to the code layer and to the venv layer ('/'-separated). Each
    must exist inside the project (relative paths are taken there) or inside the venv."""
    code: list[str] = []
    venv: list[str] = []
    for item in spec.includes:
        given = Path(item).expanduser()
        path = Path(os.path.normpath(given if given.is_absolute() else root / given))
        in_venv = venv_root is not None and _inside(str(path), str(venv_root))
        if in_venv and venv_root is not None and path != venv_root:
            target, base = venv, venv_root
        elif _inside(str(path), str(root)) and path != root:
            target, base = code, root
        else:
            raise PackError(
                f"include {item} is not a path inside {root}"
                + (f" or {venv_root}" if venv_root is not None else ""),
                field="includes",
            )
        if not os.path.lexists(path):
            raise PackError(f"include {item} does not exist in {base}", field="includes")
        target.append(path.relative_to(base).as_posix())
    return code, venv


def _editable_metadata(roots: list[Path], code_root: Path) -> list[str]:
    """The ``*.egg-info`` folders of legacy editable installs (``setup.py develop``: an
    ``.egg-link``/``.pth`` puts a project folder on ``sys.path``, its metadata lies there).
    They ship even when ``.gitignore`` lists them: ``importlib.metadata`` needs them."""
    real_code = os.path.realpath(code_root)
    kept: list[str] = []
    for root in dict.fromkeys(roots):
        try:
            names = sorted(os.listdir(root))
        except OSError:
            continue
        for name in names:
            path = os.path.join(root, name)
            if name.endswith(".egg-info") and os.path.isdir(path):
                kept.append(Path(os.path.relpath(path, real_code)).as_posix())
    return kept


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


def _shown(paths: list[str], reasons: dict[str, str]) -> str:
    """The first ten paths, each with its reason when it has one."""
    items = [f"{p} ({reasons[p]})" if p in reasons else p for p in paths[:10]]
    return ", ".join(items) + (" ..." if len(paths) > 10 else "")


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
                shown = _shown(paths, layer.reasons)
                warnings.append(
                    PackWarning(code=code, message=f"{layer.role.value}: {text}{shown}")
                )
        if layer.unchecked:
            warnings.append(
                PackWarning(
                    code="secret_scan_incomplete",
                    message=f"{layer.role.value}: {layer.unchecked} small files were not looked "
                    f"into for secrets (over the {READ_BUDGET // 2**20} MiB one scan reads; the "
                    "next scan goes on from there); name rules still apply",
                )
            )
        included = sorted(layer.included_secrets)
        if included:
            warnings.append(
                PackWarning(
                    code="secret_included",
                    message=f"{layer.role.value}: shipped because includes name them, although "
                    f"they look like secrets: {_shown(included, layer.included_secrets)}",
                    path=included[0],
                )
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
                why = f": {code.reasons[path]}" if path in code.reasons else ""
                raise PackError(
                    f"the entry point {entry.code_file} is excluded by rule '{rule.value}' "
                    f"({path}{why})",
                    field="call_path",
                    hint="add it to includes, or change the ignore rule",
                )
    raise PackError(f"the entry point {entry.code_file} is not packed", field="call_path")


def big_entries(layer: ScannedLayer, threshold: int) -> list[Entry]:
    """The code layer's files that travel as their own blobs (none for a venv, or with 0)."""
    if layer.role != LayerRole.code or threshold <= 0:
        return []
    return [e for e in layer.entries if e.kind == FILE and e.size >= threshold]


def _big_file_warning(big: list[Entry], threshold: int) -> PackWarning | None:
    data = sorted((e for e in big if e.size >= DATA_HINT_BYTES), key=lambda e: (-e.size, e.rel))
    if not data:
        return None
    shown = ", ".join(f"{e.rel} ({e.size / 1e6:.0f} MB)" for e in data[:5])
    more = f" and {len(data) - 5} more" if len(data) > 5 else ""
    return PackWarning(
        code="big_files",
        message=f"code: {shown}{more} travel as their own blobs (files of "
        f"{threshold / 1e6:.1f} MB and more: sent once, not again when other files change); "
        "data the job could read from storage (the object store, a shared file system) is "
        "better left out (excludes, .j2cignore) and read there",
        path=data[0].rel,
    )


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
                listed = paths[:MAX_LISTED]
                reasons = {p: layer.reasons[p] for p in listed if p in layer.reasons}
                groups.append(
                    ExcludedGroup(
                        layer=layer.role,
                        rule=rule,
                        count=len(paths),
                        paths=listed,
                        reasons=reasons,
                    )
                )
    return groups


def prepare(spec: PackSpec, venv_scans: VenvScans | None = None) -> Prepared:
    """Validate, scan and plan; raises PackError naming the field at fault. ``venv_scans``
    (a long-lived process's kept scans) may answer the venv's walk."""
    scanned_ns = time.time_ns()
    code_root = _code_root(spec)
    venv = open_venv(spec.venv_path.expanduser()) if spec.venv_path is not None else None
    includes, venv_includes = _includes(spec, code_root, venv.root if venv else None)
    warnings: list[PackWarning] = []
    module_roots: list[Path] = []
    project_roots: list[Path] = []
    if venv is not None:
        project_roots, pth_warnings = _check_path_entries(venv, code_root)
        warnings += pth_warnings
        if venv.site_packages is not None:
            module_roots.append(venv.site_packages)
        module_roots += project_roots
        module_roots += [Path(p) for p in venv.base.paths] if venv.base else []
    entry = resolve_entry(spec.call_path, code_root, module_roots)

    cache_dir = spec.secret_scan_cache / "secret-scan" if spec.secret_scan_cache else None
    code = scan_code(
        code_root,
        CodeRules(spec.excludes, includes + _editable_metadata(project_roots, code_root)),
        venv.root if venv else None,
        never_pack=spec.never_pack,
        verdicts=VerdictCache(cache_dir, code_root),
    )
    layers = [code]
    if venv is not None:
        venv_root = venv.root

        def walk_venv() -> ScannedLayer:
            return scan_venv(
                venv_root,
                VenvRules(venv_includes),
                never_pack=spec.never_pack,
                verdicts=VerdictCache(cache_dir, venv_root),
            )

        if venv_scans is not None and spec.watch_venv:
            rules_key = (tuple(venv_includes), tuple(map(str, spec.never_pack)), str(cache_dir))
            layers.append(venv_scans.scan(venv_root, rules_key, walk_venv))
        else:
            layers.append(walk_venv())
    _check_unreadable(layers)
    _check_entry_ships(entry, code)

    warnings += _scan_warnings(layers)
    big = big_entries(code, spec.big_file_bytes)
    if (big_warning := _big_file_warning(big, spec.big_file_bytes)) is not None:
        warnings.append(big_warning)
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
        big_files=[
            PathSize(path=e.rel, bytes=e.size)
            for e in sorted(big, key=lambda e: (-e.size, e.rel))[:MAX_LISTED]
        ],
        total_bytes=total,
        soft_limit_bytes=spec.soft_limit_bytes,
        hard_limit_bytes=spec.hard_limit_bytes,
        refused=refused,
    )
    return Prepared(spec, code_root, venv, entry, layers, plan, scanned_ns)


def preflight(spec: PackSpec, venv_scans: VenvScans | None = None) -> PackPlan:
    """What ``pack`` would ship, leave out and warn about; writes nothing."""
    return prepare(spec, venv_scans).plan
