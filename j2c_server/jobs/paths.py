"""Turn a request's paths into absolute, checked ones, confined to the server's root folder.

The browser sends paths relative to the Jupyter server's ``root_dir``; they must stay inside it
after symlinks are followed (``..``, absolute paths elsewhere and symlinks out are refused with
403 naming the field). The CLI and magic run without a root: their paths are relative to the
current directory. ``call_path`` may be given relative to the root (what the file browser shows)
or to the project folder.
"""

from __future__ import annotations

from pathlib import Path

from j2c_server.core.errors import Forbidden, InvalidInput
from j2c_server.wire.api import JobRequest

MODULE_PREFIX = "-m "


def root_folder(root_dir: str | None) -> Path | None:
    """The server's root folder, absolute with symlinks followed (None without one)."""
    return Path(root_dir).expanduser().resolve() if root_dir else None


def confine(path: Path, root: Path | None, field: str, shown: str | None = None) -> Path:
    """``path`` with symlinks followed; Forbidden (naming ``field``) when that leaves ``root``."""
    resolved = path.resolve()
    if root is not None and not resolved.is_relative_to(root):
        raise Forbidden(
            f"{field}: {shown or str(path)!r} is outside the server's root folder", field=field
        )
    return resolved


def _resolve(raw: str, base: Path, root: Path | None, field: str) -> Path:
    if "\x00" in raw:
        raise InvalidInput(f"{field}: contains a NUL character", field=field)
    return confine(base / Path(raw).expanduser(), root, field, shown=raw)


def resolve_request(request: JobRequest, root_dir: str | None) -> JobRequest:
    """A copy of ``request`` whose paths are absolute, existing and inside ``root_dir``."""
    root = root_folder(root_dir)
    base = root if root is not None else Path.cwd()

    code = _resolve(request.code_path, base, root, "code_path")
    if not code.is_dir():
        raise InvalidInput(f"code_path: {request.code_path!r} is not a folder", field="code_path")

    call = request.call_path.strip()
    if call.startswith(MODULE_PREFIX):
        if not call[len(MODULE_PREFIX) :].strip():
            raise InvalidInput("call_path: '-m' needs a module name", field="call_path")
    else:
        entry = _resolve(call, base, root, "call_path")
        if not entry.is_relative_to(code):
            entry = _resolve(call, code, root, "call_path")
        if not entry.is_relative_to(code):
            raise InvalidInput(
                f"call_path: {request.call_path!r} is not inside the project folder "
                f"{request.code_path!r}",
                field="call_path",
            )
        if not entry.is_file():
            raise InvalidInput(f"call_path: {request.call_path!r} is not a file", field="call_path")
        call = str(entry)

    venv: str | None = None
    if request.venv_path:
        venv_dir = _resolve(request.venv_path, base, root, "venv_path")
        if not (venv_dir / "pyvenv.cfg").is_file():
            raise InvalidInput(
                f"venv_path: {request.venv_path!r} is not a virtual environment (no pyvenv.cfg)",
                field="venv_path",
            )
        venv = str(venv_dir)

    return request.model_copy(update={"code_path": str(code), "call_path": call, "venv_path": venv})


def resolve_call_path(call_path: str, code_path: Path, cwd: Path | None = None) -> str:
    """The one rule every front end applies to a typed entry point (before the server checks).

    ``-m module`` and absolute paths pass through. A relative path is taken inside the project
    ``code_path`` — the seed's ``--code-path DIR --call-path train.py`` typed from any folder —
    except when ``cwd`` lies inside the project and the file exists relative to it: then it is
    the file the user sees there (``cd proj/src && j2c submit run.py``).
    """
    text = call_path.strip()
    if text == "-m" or text.startswith(("-m ", "-m\t")):
        return text
    given = Path(text).expanduser()
    if given.is_absolute():
        return str(given.resolve())
    code = code_path.expanduser().resolve()
    if cwd is not None:
        here = cwd.resolve()
        if here.is_relative_to(code) and (here / given).is_file():
            return str((here / given).resolve())
    return str((code / given).resolve())
