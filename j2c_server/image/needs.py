"""What a job needs from its base Python, read in the lab.

- the venv's distributions (they ship) with their ``Requires-Dist`` and wheel tags;
- the lab base's distributions (what ``--system-site-packages`` let pip skip), with the
  import names each provides;
- the top-level imports of the project's ``.py`` files and notebook code cells (``ast``), minus
  the standard library and the project's own modules. An import inside ``try`` that handles
  ``ImportError`` is optional and not counted, nor one under ``if TYPE_CHECKING``; of them, those
  that surely run when the entry point runs (``reachable``: module by module from the entry,
  imports inside functions of imported modules left out).

Everything read is memoised by path and mtime in this process, so the server's second preflight
of a project re-reads only what changed.
"""

from __future__ import annotations

import ast
import contextlib
import csv
import json
import os
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from j2c_server.unpack.inventory import normalize, top_level

_SKIP_DIRS = frozenset({"__pycache__", "node_modules", "site-packages", "dist-packages"})
MAX_SOURCE_FILES = 5000
MAX_WALKED = 200_000  # names looked at in the project, at most
_OPTIONAL = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})


@dataclass(frozen=True)
class LabDist:
    key: str  # PEP 503 name
    name: str
    version: str
    requires: tuple[str, ...]
    top_level: tuple[str, ...]
    path: Path  # its .dist-info / .egg-info folder
    tags: tuple[str, ...] = ()  # WHEEL's Tag lines (compiled wheels only)

    @property
    def label(self) -> str:
        return f"{self.name} {self.version}"

    def size(self) -> int:
        """Installed bytes, by RECORD (files it lists without a size are stat'ed)."""
        try:
            text = (self.path / "RECORD").read_text(errors="replace")
        except OSError:
            return 0
        total = 0
        for row in csv.reader(text.splitlines()):
            if not row:
                continue
            if len(row) >= 3 and row[2].isdigit():
                total += int(row[2])
                continue
            with contextlib.suppress(OSError):
                total += os.stat(self.path.parent / row[0]).st_size
        return total


_dist_memo: dict[tuple[str, int], LabDist | None] = {}
_imports_memo: dict[tuple[str, int, int], tuple[Imported, ...]] = {}


def _wheel_tags(folder: Path) -> tuple[str, ...]:
    try:
        text = (folder / "WHEEL").read_text(errors="replace")
    except OSError:
        return ()
    if "root-is-purelib: true" in text.lower():
        return ()
    return tuple(
        line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Tag:")
    )


def _headers(text: str) -> dict[str, list[str]]:
    """A core metadata file's headers (the part before its body), continuation lines joined;
    read by hand: the email parser costs milliseconds a file, and a venv has hundreds."""
    found: dict[str, list[str]] = {}
    last: list[str] | None = None
    for line in text.splitlines():
        if not line:
            break
        if line[0] in " \t" and last:
            last[-1] += " " + line.strip()
            continue
        name, sep, value = line.partition(":")
        if sep:
            last = found.setdefault(name.strip().lower(), [])
            last.append(value.strip())
    return found


def _read_dist(folder: Path) -> LabDist | None:
    dist = metadata.PathDistribution(folder)
    if folder.suffix == ".dist-info":
        headers = _headers(dist.read_text("METADATA") or "")
        name = (headers.get("name") or [""])[0]
        version = (headers.get("version") or [""])[0]
        requires: list[str] = headers.get("requires-dist", [])
    else:  # egg-info: PKG-INFO plus requires.txt, which importlib.metadata translates
        name, version = dist.metadata["Name"] or "", dist.version
        requires = list(dist.requires or [])
    if not name:
        return None
    return LabDist(
        key=normalize(name),
        name=name,
        version=version,
        requires=tuple(requires),
        top_level=tuple(top_level(dist)),
        path=folder,
        tags=_wheel_tags(folder),
    )


def lab_dists(folders: list[Path]) -> dict[str, LabDist]:
    """Key → distribution in ``folders``; the first folder holding a name wins (as imports)."""
    found: dict[str, LabDist] = {}
    for root in folders:
        try:
            names = sorted(os.listdir(root))
        except OSError:
            continue
        for name in names:
            if not name.endswith((".dist-info", ".egg-info")):
                continue
            folder = root / name
            try:
                mtime = os.stat(folder).st_mtime_ns
            except OSError:
                continue
            memo = (str(folder), mtime)
            if memo not in _dist_memo:
                _dist_memo[memo] = _read_dist(folder) if folder.is_dir() else None
            dist = _dist_memo[memo]
            if dist is not None:
                found.setdefault(dist.key, dist)
    return found


# ---------------------------------------------------------------------- the project's imports


def _optional(node: ast.Try) -> bool:
    for handler in node.handlers:
        kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        if handler.type is None or any(
            isinstance(k, ast.Name) and k.id in _OPTIONAL for k in kinds
        ):
            return True
    return False


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


@dataclass(frozen=True)
class Imported:
    """One imported module: ``a.b`` (``level`` 0) or relative (``from ..a import b``: level 2,
    module ``a``), the names a ``from`` import takes (a submodule may be among them), and
    whether it runs when its file is imported (``eager``: not inside a function body)."""

    module: str
    level: int = 0
    names: tuple[str, ...] = ()
    eager: bool = True


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def imports_of(tree: ast.AST) -> list[Imported]:
    """Every import of a module, but not optional or type-checking ones."""
    found: list[Imported] = []
    todo: list[tuple[ast.AST, bool]] = [(tree, True)]
    while todo:
        node, eager = todo.pop()
        if isinstance(node, ast.Import):
            found.extend(Imported(alias.name, eager=eager) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names = tuple(alias.name for alias in node.names)
            found.append(Imported(node.module or "", node.level, names, eager))
        elif isinstance(node, ast.Try) and _optional(node):
            todo.extend((n, eager) for n in [*node.handlers, *node.orelse, *node.finalbody])
        elif isinstance(node, ast.If) and _type_checking(node):
            todo.extend((n, eager) for n in node.orelse)
        else:
            inner = eager and not isinstance(node, _FUNCTIONS)
            todo.extend((child, inner) for child in ast.iter_child_nodes(node))
    return found


def imported_names(tree: ast.AST) -> set[str]:
    """The first part of every absolute import, but not optional or type-checking ones."""
    return {i.module.split(".")[0] for i in imports_of(tree) if i.level == 0 and i.module}


def _notebook_source(text: str) -> list[str]:
    """Each code cell's source, IPython's magics and shell lines left out."""
    cells = json.loads(text).get("cells", [])
    sources = []
    for cell in cells:
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        lines = source if isinstance(source, list) else source.splitlines(keepends=True)
        kept = ["\n" if line.lstrip().startswith(("%", "!")) else line for line in lines]
        sources.append("".join(kept))
    return sources


def _file_imports(path: Path, st: os.stat_result) -> tuple[Imported, ...]:
    memo = (str(path), st.st_mtime_ns, st.st_size)
    if memo in _imports_memo:
        return _imports_memo[memo]
    found: list[Imported] = []
    try:
        text = path.read_text(errors="replace")
        sources = _notebook_source(text) if path.suffix == ".ipynb" else [text]
    except (OSError, ValueError, AttributeError):
        sources = []
    for source in sources:
        try:
            found.extend(imports_of(ast.parse(source)))
        except (SyntaxError, ValueError):
            continue  # not this check's business: the job says so when it runs
    _imports_memo[memo] = tuple(dict.fromkeys(found))
    return _imports_memo[memo]


@dataclass
class ProjectImports:
    by_module: dict[str, list[str]] = field(default_factory=dict)  # module → files importing it
    local: set[str] = field(default_factory=set)  # the project's own module names
    # Of by_module, what surely runs when the entry point runs: the entry file's imports and
    # those the project's modules it imports make when imported, transitively (not those inside
    # their functions); None without a Python entry file.
    reachable: dict[str, list[str]] | None = None


def import_roots(
    code_root: Path, entry: str | None = None, editable: list[Path] | None = None
) -> list[Path]:
    """The folders the job's ``sys.path`` has inside the project: the entry script's folder (a
    script's ``sys.path[0]``), the project root (the working folder, ``-m``), a ``src/``
    layout, and the project's paths editable installs put on the venv's path."""
    roots: list[Path] = []
    if entry and not entry.startswith("-m "):
        roots.append((code_root / entry).parent)
    roots.append(code_root)
    if (code_root / "src").is_dir():
        roots.append(code_root / "src")
    for path in editable or []:
        if path == code_root or code_root in path.parents:
            roots.append(path)
    return list(dict.fromkeys(roots))


def editable_paths(site_packages: Path) -> list[Path]:
    """The folders a venv's ``.pth`` files put on its path (editable installs): absolute lines
    naming a folder (``import`` lines are code, not read)."""
    found: list[Path] = []
    try:
        pth_files = sorted(site_packages.glob("*.pth"))
    except OSError:
        return found
    for pth in pth_files:
        with contextlib.suppress(OSError, UnicodeDecodeError):
            for line in pth.read_text().splitlines():
                line = line.strip()
                if line.startswith("/") and Path(line).is_dir():
                    found.append(Path(line))
    return found


def _top_level_names(root: Path) -> dict[str, Path]:
    """What ``import NAME`` finds in ``root``: modules (``NAME.py``) and packages or namespace
    packages (a folder named like an identifier), each with its path."""
    names: dict[str, Path] = {}
    try:
        entries = list(os.scandir(root))
    except OSError:
        return names
    for item in entries:
        stem, suffix = os.path.splitext(item.name)
        if item.is_file() and suffix == ".py" and stem.isidentifier():
            names.setdefault(stem, Path(item.path))
        elif item.is_dir() and item.name.isidentifier() and item.name not in _SKIP_DIRS:
            names.setdefault(item.name, Path(item.path))
    return names


def project_imports(
    code_root: Path,
    skip: list[Path],
    roots: list[Path] | None = None,
    entry: Path | None = None,
) -> ProjectImports:
    """The imports of the project's sources (at most :data:`MAX_SOURCE_FILES` files, among the
    first :data:`MAX_WALKED` names), without nested virtual environments, hidden folders, caches
    (``CACHEDIR.TAG``) and ``skip`` (the venv, j2c's data). The project's own modules are the
    names importable at its ``roots`` (:func:`import_roots`; default: the project root and a
    ``src/`` layout) — not every file name anywhere in the tree: ``pkg/regex.py`` must not hide
    the ``regex`` distribution it imports. With ``entry`` (the entry file), ``reachable`` says
    what its own code imports."""
    found = ProjectImports()
    roots = roots if roots is not None else import_roots(code_root)
    local_paths: dict[str, Path] = {}
    for root in roots:
        for name, path in _top_level_names(root).items():
            local_paths.setdefault(name, path)
    found.local = set(local_paths)
    skipped = {os.path.realpath(p) for p in skip}
    per_file: dict[str, tuple[Imported, ...]] = {}
    seen = walked = 0
    for folder, dirs, files in os.walk(code_root):
        walked += len(dirs) + len(files)
        if walked > MAX_WALKED:
            break  # a data folder of millions of files: the sources met so far will do
        dirs[:] = sorted(
            d
            for d in dirs
            if not d.startswith(".")
            and d not in _SKIP_DIRS
            and os.path.realpath(os.path.join(folder, d)) not in skipped
            and not any(
                os.path.exists(os.path.join(folder, d, mark))
                for mark in ("pyvenv.cfg", "CACHEDIR.TAG")
            )
        )
        for name in sorted(files):
            suffix = os.path.splitext(name)[1]
            if suffix not in (".py", ".ipynb") or seen >= MAX_SOURCE_FILES:
                continue
            seen += 1
            path = Path(folder, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            rel = path.relative_to(code_root).as_posix()
            per_file[rel] = _file_imports(path, st)
            for item in per_file[rel]:
                if item.level == 0 and item.module:
                    module = item.module.split(".")[0]
                    if rel not in found.by_module.get(module, []):
                        found.by_module.setdefault(module, []).append(rel)
    not_external = {*found.local, *sys.stdlib_module_names, "__future__"}
    for module in not_external:
        found.by_module.pop(module, None)
    if entry is not None and entry.suffix in (".py", ".ipynb"):
        found.reachable = _reachable(code_root, entry, per_file, local_paths, not_external)
    return found


def _reachable(
    code_root: Path,
    entry: Path,
    per_file: dict[str, tuple[Imported, ...]],
    local_paths: dict[str, Path],
    not_external: set[str],
) -> dict[str, list[str]]:
    """The external imports that run when the entry runs: the entry file's (all of them: its
    functions are what runs), and, of the project's modules it imports, transitively, those
    made when the module is imported (an import inside a function runs only if it is called:
    ``from_pretrained`` importing ``transformers`` must not count). A module reaches the
    ``__init__.py`` of its packages and the submodules it names, not its package's other files."""

    def rel(path: Path) -> str | None:
        try:
            return path.relative_to(code_root).as_posix()
        except ValueError:
            return None

    def walk(start: Path, parts: list[str], names: tuple[str, ...]) -> list[Path]:
        """The files importing ``parts`` from ``start`` (a module or package) runs."""
        files: list[Path] = []
        path = start
        for part in ["", *parts]:
            if part:
                if (path / part).is_dir():
                    path = path / part
                elif (path / f"{part}.py").is_file():
                    path = path / f"{part}.py"
                else:
                    return files
            if path.is_file():
                return [*files, path]
            files.append(path / "__init__.py")
        for name in names:  # ``from pkg import sub``: sub may be a module of pkg
            if (path / name).is_dir() or (path / f"{name}.py").is_file():
                files.extend(walk(path, [name], ()))
        return files

    start = rel(entry)
    if start is None:
        return {}
    todo, done = [start], set()
    external: dict[str, list[str]] = {}
    while todo:
        here = todo.pop()
        if here in done or here not in per_file:
            continue
        done.add(here)
        for item in per_file[here]:
            if not item.eager and here != start:
                continue
            parts = [part for part in item.module.split(".") if part]
            if item.level > 0:  # relative: from the file's own package
                folder = (code_root / here).parent
                for _ in range(item.level - 1):
                    folder = folder.parent
                files = walk(folder, parts, item.names)
            elif parts and parts[0] in local_paths:
                files = walk(local_paths[parts[0]], parts[1:], item.names)
            else:
                if parts and parts[0] not in not_external:
                    external.setdefault(parts[0], [])
                    if here not in external[parts[0]]:
                        external[parts[0]].append(here)
                continue
            todo.extend(r for r in map(rel, files) if r is not None)
    return external
