"""What a send ships when the user names nothing: one rule for every front end.

The UI's form (``GET <base>/j2c/api/defaults``), ``%j2c submit`` and ``j2c submit`` all ask
:func:`send_defaults` (or its parts) which project folder, entry point and venv to propose.

- **Project folder**: the nearest folder at or above the file holding ``.git`` or
  ``pyproject.toml``, never above the server's root. A marked folder whose own ignore rules
  (``.gitignore``, ``.j2cignore``, j2c's built-in junk) leave the file's folder out is not the
  file's project (shipping it would leave the entry point behind): the project is then the
  folder just below the ignored one, e.g. ``repo/.lab/digits`` for ``repo/.lab/digits/train.py``
  when ``repo/.gitignore`` lists ``.lab/``. Without a marker it is the file's own folder.
- **Venv**, first match wins:

  1. a venv the user activated (the CLI's ``$VIRTUAL_ENV``): a deliberate choice;
  2. the kernel's venv when it lies inside the project;
  3. the project's own ``.venv`` or ``venv`` (one holding ``pyvenv.cfg``);
  4. the kernel's venv when it lies inside the server's root;
  5. the kernel's venv outside the root only when it was made with
     ``--system-site-packages`` and no server root confines the paths (CLI, magic): a thin
     layer over the platform's packages;
  6. otherwise none: a venv outside the root that is not ``--system-site-packages`` is, behind
     JupyterHub, the hub's own environment (hundreds of MB, and the job then lacks the
     platform's packages). The reason says what was left and how to ship it anyway.

Every choice comes with a one-line reason the front ends show.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from j2c_server.core.errors import InvalidInput
from j2c_server.jobs.paths import confine
from j2c_server.pack.ignore import CodeRules, IgnoreLevel
from j2c_server.wire.api import SendDefaults

PROJECT_MARKERS = (".git", "pyproject.toml")
VENV_NAMES = (".venv", "venv")


@dataclass(frozen=True)
class VenvChoice:
    path: Path | None
    reason: str


@dataclass(frozen=True)
class Defaults:
    code_path: Path
    call_path: Path | None
    venv: VenvChoice


def is_venv(path: Path) -> bool:
    return (path / "pyvenv.cfg").is_file()


def system_site_packages(venv: Path) -> bool:
    """Whether ``venv`` was made with ``--system-site-packages`` (read from its pyvenv.cfg)."""
    try:
        lines = (venv / "pyvenv.cfg").read_text(errors="replace").splitlines()
    except OSError:
        return False
    for line in lines:
        key, sep, value = line.partition("=")
        if sep and key.strip().lower() == "include-system-site-packages":
            return value.strip().lower() == "true"
    return False


def _inside(path: Path, folder: Path | None) -> bool:
    return folder is not None and path.is_relative_to(folder)


def _ignored_below(marked: Path, start: Path) -> Path | None:
    """The first folder between ``marked`` (exclusive) and ``start`` (inclusive) that
    ``marked``'s ignore rules leave out, or None when the whole way is shipped."""
    rules = CodeRules([], [])
    levels: list[IgnoreLevel] = []
    folder, rel = marked, ""
    for part in start.relative_to(marked).parts:
        names = {name for name in (".gitignore", ".j2cignore") if (folder / name).is_file()}
        level = CodeRules.read_level(folder, f"{rel}/" if rel else "", names)
        if level is not None:
            levels.append(level)
        rel = f"{rel}/{part}" if rel else part
        folder = folder / part
        if rules.rule_for(rel, part, True, levels) is not None:
            return folder
    return None


def project_root(start: Path, boundary: Path | None = None) -> Path:
    """The project folder of a file in folder ``start`` (see the module docstring)."""
    start = start.resolve()
    boundary = boundary.resolve() if boundary is not None else None
    for folder in (start, *start.parents):
        if boundary is not None and not folder.is_relative_to(boundary):
            break
        if any((folder / marker).exists() for marker in PROJECT_MARKERS):
            ignored = _ignored_below(folder, start)
            if ignored is None:
                return folder
            # The project is what lies just below the ignored folder, on the way to start.
            return start if ignored == start else ignored / start.relative_to(ignored).parts[0]
    return start


def _project_venv(project: Path) -> Path | None:
    found = next((project / n for n in VENV_NAMES if is_venv(project / n)), None)
    return found.resolve() if found is not None else None


def choose_venv(
    project: Path,
    root: Path | None = None,
    kernel_prefix: Path | None = None,
    active_venv: Path | None = None,
) -> VenvChoice:
    """The venv to propose for ``project`` (see the module docstring for the order)."""
    project = project.resolve()
    if active_venv is not None:
        active = active_venv.resolve()
        return VenvChoice(active, f"the active venv {active} ($VIRTUAL_ENV)")
    kernel = kernel_prefix.resolve() if kernel_prefix is not None else None
    own = _project_venv(project)
    if kernel is not None and root is not None and not _inside(kernel, root):
        # A browser's request: paths outside the root are neither shipped nor read.
        if own is not None:
            return VenvChoice(own, f"the project's venv {_shown(own, root)}")
        return VenvChoice(
            None,
            f"no venv: the kernel's venv {kernel} is outside the server's root (behind "
            "JupyterHub that is the hub's own environment); give a venv inside the root",
        )
    if kernel is not None and not is_venv(kernel):
        kernel = None  # the kernel runs on a base interpreter: nothing to ship for it
    if kernel is not None and _inside(kernel, project):
        return VenvChoice(kernel, f"the notebook kernel's venv {_shown(kernel, root)}")
    if own is not None:
        return VenvChoice(own, f"the project's venv {_shown(own, root)}")
    if kernel is None:
        return VenvChoice(None, f"no venv: the project {_shown(project, root)} has no .venv")
    if _inside(kernel, root):
        return VenvChoice(kernel, f"the notebook kernel's venv {_shown(kernel, root)}")
    if system_site_packages(kernel):
        return VenvChoice(
            kernel,
            f"the kernel's venv {kernel}: outside the project, made with "
            "--system-site-packages (only its own packages ship)",
        )
    return VenvChoice(
        None,
        f"no venv: the kernel's venv {kernel} is outside the project and not "
        "--system-site-packages (behind JupyterHub that is the hub's own environment); "
        "give --venv-path to ship it",
    )


def _shown(path: Path, root: Path | None) -> str:
    if root is not None and path.is_relative_to(root):
        rel = path.relative_to(root).as_posix()
        return rel if rel != "." else "(the root)"
    return str(path)


def send_defaults(
    file: Path,
    root: Path | None = None,
    kernel_prefix: Path | None = None,
    active_venv: Path | None = None,
) -> Defaults:
    """Project, entry point and venv for sending ``file`` (a script, a notebook, or a folder)."""
    file = file.resolve()
    folder = file if file.is_dir() else file.parent
    project = project_root(folder, root)
    call = file if file.is_file() else None
    venv = choose_venv(project, root, kernel_prefix, active_venv)
    return Defaults(code_path=project, call_path=call, venv=venv)


def environ_venv(environ: Mapping[str, str]) -> Path | None:
    """The venv the shell activated, if any."""
    value = environ.get("VIRTUAL_ENV")
    return Path(value) if value else None


def defaults_for_browser(root_dir: str, path: str, kernel_prefix: str | None) -> SendDefaults:
    """``GET /j2c/api/defaults``: :func:`send_defaults` for a root-relative ``path``, answered
    with root-relative paths. Bad input names its query field."""
    root = Path(root_dir).expanduser().resolve()
    if "\x00" in path:
        raise InvalidInput("path: contains a NUL character", field="path")
    target = confine(root / path.lstrip("/"), root, "path", shown=path)
    if not target.exists():
        raise InvalidInput(f"path: {path!r} does not exist", field="path")
    prefix: Path | None = None
    if kernel_prefix:
        if "\x00" in kernel_prefix or not Path(kernel_prefix).is_absolute():
            raise InvalidInput(
                f"kernel_prefix: {kernel_prefix!r} must be an absolute path (the kernel's "
                "sys.prefix)",
                field="kernel_prefix",
            )
        prefix = Path(kernel_prefix)
    chosen = send_defaults(target, root=root, kernel_prefix=prefix)

    def rel(value: Path) -> str:
        text = value.relative_to(root).as_posix()
        return "" if text == "." else text

    return SendDefaults(
        code_path=rel(chosen.code_path),
        call_path=chosen.call_path.relative_to(chosen.code_path).as_posix()
        if chosen.call_path is not None
        else None,
        venv_path=rel(chosen.venv.path)
        if chosen.venv.path is not None and chosen.venv.path.is_relative_to(root)
        else None,
        venv_reason=chosen.venv.reason,
    )
