"""Operator-locked settings: keys a user's own config cannot set.

The operator's files are the ``j2c.yaml`` of Jupyter's *system* config folders
(``/usr/local/etc/jupyter``, ``/etc/jupyter``: root's, not the user's nor the environment's,
which a user who owns the venv can write). A ``locked:`` list there names settings by dotted key
(``scheduler.kubernetes.namespace``, or a whole section: ``scheduler.container``). A locked key
takes the operator's value (or the default, where the operator's file does not set it), and any
other layer that sets it — the user's ``~/.jupyter/j2c.yaml``, ``$J2C_CONFIG``, the environment's
``etc/jupyter``, a ``J2C_*`` variable, the server's or CLI's overrides — is an error naming the
key, where it was set and the file that locked it (an error, not a warning: a job must not run
with a setting the user believes is theirs). The lock holds even when ``$J2C_CONFIG`` leaves the
operator's file out of the merge.

A guardrail, not isolation: the user owns the server process and can run any code with its
credentials; see docs/operators.md, "Security model".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from j2c_server.core.errors import ConfigError

LOCK_KEY = "locked"
_MISSING = object()


# The operator's folders, highest precedence last: Jupyter's system config path on POSIX
# (jupyter_core's SYSTEM_CONFIG_PATH, reversed; this module is stdlib-only). Tests point it at a
# temporary folder.
OPERATOR_DIRS: list[Path] = [Path("/etc/jupyter"), Path("/usr/local/etc/jupyter")]


@dataclass(frozen=True)
class Layer:
    """One source of settings: a file (``path``), the environment, or overrides."""

    source: str
    data: dict[str, Any]
    path: Path | None = None
    env: bool = False


def operator_files() -> list[Path]:
    return [folder / "j2c.yaml" for folder in OPERATOR_DIRS if (folder / "j2c.yaml").is_file()]


def _is_operator_file(path: Path | None, operator: list[Path]) -> bool:
    if path is None:
        return False
    resolved = path.expanduser().resolve()
    return any(resolved == each.resolve() for each in operator)


def _read_locks(path: Path, data: dict[str, Any]) -> list[str]:
    keys = data.get(LOCK_KEY) or []
    if not isinstance(keys, list) or not all(
        isinstance(k, str) and k and all(k.split(".")) for k in keys
    ):
        raise ConfigError(
            f"{path}: {LOCK_KEY}: must be a list of dotted setting keys "
            "(e.g. scheduler.kubernetes.namespace)",
            field=LOCK_KEY,
        )
    return keys


def _get(data: dict[str, Any], parts: list[str]) -> Any:
    node: Any = data
    for part in parts:
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _sets(data: dict[str, Any], parts: list[str]) -> list[str] | None:
    """The key path at which ``data`` sets ``parts`` (or a section above it), else None."""
    node: Any = data
    for depth, part in enumerate(parts):
        if not isinstance(node, dict):
            return parts[:depth]  # a scalar where the section is: it replaces the section
        if part not in node:
            return None
        node = node[part]
    return parts


def _where(layer: Layer, parts: list[str]) -> str:
    if layer.env:
        return "J2C_" + "__".join(part.upper() for part in parts)
    return layer.source


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _put(data: dict[str, Any], parts: list[str], value: Any) -> None:
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    if value is _MISSING:
        node.pop(parts[-1], None)
    else:
        node[parts[-1]] = value


def operator_locks(read: Callable[[Path], dict[str, Any]]) -> frozenset[str]:
    """The dotted keys the operator's files lock (what a backend asks before it refuses a
    setting that only an operator may choose)."""
    return frozenset(key for path in operator_files() for key in _read_locks(path, read(path)))


def is_locked(locks: frozenset[str], key: str) -> bool:
    """Whether ``key`` or a section above it is locked."""
    return any(key == lock or key.startswith(lock + ".") for lock in locks)


def merge_with_locks(layers: list[Layer], read: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    """The layers merged in order, the operator's locks enforced (see the module's doc)."""
    operator = operator_files()
    locks: dict[str, Path] = {}
    operator_data: dict[str, Any] = {}
    for path in operator:
        data = read(path)
        for key in _read_locks(path, data):
            locks[key] = path
        operator_data = _merge(operator_data, data)
    merged: dict[str, Any] = {}
    for layer in layers:
        data = dict(layer.data)
        if _is_operator_file(layer.path, operator):
            data.pop(LOCK_KEY, None)
        elif LOCK_KEY in data:
            raise ConfigError(
                f"{layer.source}: {LOCK_KEY}: is read only from the operator's file "
                f"({', '.join(str(d / 'j2c.yaml') for d in OPERATOR_DIRS)})",
                field=LOCK_KEY,
            )
        else:
            for key, locked_by in locks.items():
                hit = _sets(data, key.split("."))
                if hit is not None:
                    raise ConfigError(
                        f"{key} is locked by the operator in {locked_by}: "
                        f"{_where(layer, hit)} may not set it",
                        field=key,
                        hint=f"remove it from {_where(layer, hit)}; the operator's value applies",
                    )
        merged = _merge(merged, data)
    for key in locks:
        parts = key.split(".")
        _put(merged, parts, _get(operator_data, parts))
    merged.pop(LOCK_KEY, None)
    return merged
