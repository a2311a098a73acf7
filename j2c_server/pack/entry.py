"""Resolve the entry point: a script or notebook in the project, or ``-m package.module``.

A relative ``call_path`` is looked up in the code path first, then in the current directory (the
CLI user who types ``--call-path proj/train.py``); either way it must end up inside the code
path. A module must resolve to a file or package (with ``__main__.py``) in the project, in the
venv's site-packages or an editable install of it, or in the base interpreter's ``sys.path``:
the job runs on the same platform image, so ``-m torch.distributed.run`` is there too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from j2c_server.core.errors import PackError
from j2c_server.wire.manifest import EntryPoint

SCRIPT_SUFFIXES: dict[str, Literal["script", "notebook"]] = {".py": "script", ".ipynb": "notebook"}


@dataclass(frozen=True)
class ResolvedEntry:
    entry: EntryPoint
    code_file: str | None  # the project-relative file that must ship, when it is in the project


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def resolve_entry(call_path: str, code_root: Path, module_roots: list[Path]) -> ResolvedEntry:
    text = call_path.strip()
    if text == "-m" or text.startswith(("-m ", "-m\t")):
        return _resolve_module(text[2:].strip(), code_root, module_roots)
    return _resolve_file(text, code_root)


def _resolve_file(text: str, code_root: Path) -> ResolvedEntry:
    given = Path(text).expanduser()
    candidates = [given] if given.is_absolute() else [code_root / given, Path.cwd() / given]
    found = next((c for c in candidates if os.path.lexists(c)), None)
    if found is None:
        raise PackError(f"call path {text} does not exist in {code_root}", field="call_path")
    real_root = os.path.realpath(code_root)
    real = os.path.realpath(found)
    if not _inside(real, real_root):
        raise PackError(
            f"call path {text} is outside the code path {code_root}",
            field="call_path",
            hint="the entry point must be part of the project that is shipped",
        )
    if not os.path.isfile(real):
        raise PackError(f"call path {text} is not a file", field="call_path")
    kind = SCRIPT_SUFFIXES.get(Path(real).suffix.lower())
    if kind is None:
        raise PackError(
            f"call path {text} must be a .py script, a .ipynb notebook or '-m package.module'",
            field="call_path",
        )
    rel = Path(os.path.relpath(real, real_root)).as_posix()
    return ResolvedEntry(EntryPoint(kind=kind, target=rel), rel)


def _module_file(root: Path, parts: list[str]) -> Path | None:
    """The file ``python -m`` would run for ``parts`` under ``root``, or None."""
    parent = root.joinpath(*parts[:-1])
    last = parts[-1]
    candidates = [parent / f"{last}.py", parent / last / "__main__.py"]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    if parent.is_dir():
        # Compiled extension modules (e.g. 'name.cpython-311-x86_64-linux-gnu.so').
        for so in sorted(parent.glob(f"{last}.*so")):
            return so
    return None


def _resolve_module(module: str, code_root: Path, module_roots: list[Path]) -> ResolvedEntry:
    parts = module.split(".")
    if not module or not all(part.isidentifier() for part in parts):
        raise PackError(
            f"'-m {module}' is not a valid module name (expected e.g. '-m package.module')",
            field="call_path",
        )
    entry = EntryPoint(kind="module", target=module)
    found = _module_file(code_root, parts)
    if found is not None:
        return ResolvedEntry(entry, found.relative_to(code_root).as_posix())
    real_root = os.path.realpath(code_root)
    for root in module_roots:
        found = _module_file(root, parts)
        if found is not None:
            real = os.path.realpath(found)
            # An editable install of the project itself (src layout) ships with the code.
            rel = os.path.relpath(real, real_root) if _inside(real, real_root) else None
            return ResolvedEntry(entry, Path(rel).as_posix() if rel else None)
    raise PackError(
        f"module '{module}' was not found in the code path {code_root} or the venv",
        field="call_path",
        hint=f"looked for {'/'.join(parts)}.py and {'/'.join(parts)}/__main__.py",
    )
