"""Where the layers land: back at their original absolute paths, or under the workdir.

- ``original``: code and venv return to the absolute paths they were packed from
  (``layer.source_path``), so every path embedded in the venv stays true. That needs each path to
  be free (absent, or an empty folder), writable, and *private to the job's user*: the folder
  (when it exists) and every existing folder above it are owned by the job's user or root, the
  folder itself is writable by nobody else, and no folder above it is group- or other-writable
  unless it is sticky (``/tmp``: others cannot rename or delete what is ours in it). Otherwise
  another local user could swap the code between extraction and run. When a path fails, all
  layers go under the workdir instead, and j2c-unpack says why. ``--trust-original-paths`` (or
  ``J2C_UNPACK_TRUST_PATHS=1``) lets an operator whose nodes have no other users skip the
  ownership checks.
- ``relocate``: code at ``<workdir>/code``; the venv at ``<workdir>/venv``, or at the same place
  inside the code folder when it lived inside the project. The paths the venv embeds are then
  rewritten (relocate.py).

Original-path copies belong to one job: the folders j2c-unpack creates for them (and the
contents of an empty folder it adopted) are removed when the job ends (:func:`release`), so the
next job on the node never finds, or runs against, a previous job's tree. They are recorded in
the workdir, so a restarted job with the same ``--workdir`` removes what a killed run left.

In relocate mode a previous run's ``code``/``venv`` folders in the workdir (a restarted job) are
replaced; the workdir is j2c-unpack's own (workdir.py), so nothing else is ever removed.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from j2c_server.core.manifest_plan import LayerPlan, LayerRole, ManifestPlan
from j2c_server.unpack.base_packages import check_base_layers, with_base_home
from j2c_server.unpack.errors import LocalIOError, ManifestInvalid
from j2c_server.unpack.log import say, warn

Mode = Literal["original", "relocate"]
TRUST_ENV = "J2C_UNPACK_TRUST_PATHS"
RECORD = ".j2c-original-paths.json"  # in the workdir: the original-path folders this job made


@dataclass(frozen=True)
class Owned:
    """An original-path folder this job made (``created``) or adopted empty; (dev, ino) tell
    that it is still the same folder when it is removed."""

    path: str
    dev: int
    ino: int
    created: bool


@dataclass(frozen=True)
class Placement:
    mode: Mode
    homes: dict[LayerRole, Path]  # where each layer is extracted
    moves: dict[str, str]  # original path -> new path, for the layers that moved
    owned: tuple[Owned, ...] = field(default=())  # original-path folders to release at the end
    locks: tuple[int, ...] = field(default=())  # flock'ed fds of the original homes

    @property
    def code(self) -> Path:
        return self.homes[LayerRole.code]

    @property
    def venv(self) -> Path | None:
        return self.homes.get(LayerRole.venv)


def trust_requested(flag: bool) -> bool:
    return flag or os.environ.get(TRUST_ENV, "").strip().lower() in {"1", "true", "yes"}


def place_layers(
    manifest: ManifestPlan, mode: Mode, workdir: Path, *, trust: bool = False
) -> Placement:
    """Decide where each layer goes and prepare it: original-path folders are created (and
    recorded in the workdir); in relocate mode, what a previous run left there is cleared."""
    layers = _layers(manifest)
    originals = {role: Path(layer.source_path) for role, layer in layers.items()}
    _release_recorded(workdir)
    if mode == "original":
        if trust:
            say("placing", f"original paths trusted without ownership checks ({TRUST_ENV})")
        reasons = [
            f"{path} {why}" for path in originals.values() if (why := _unavailable(path, trust))
        ]
        if not reasons:
            claimed = _claim(_outermost(originals), workdir, trust)
            if isinstance(claimed, tuple):
                return Placement("original", with_base_home(manifest, originals), {}, *claimed)
            reasons = [claimed]
        say("placing", f"relocating under {workdir}: {'; '.join(reasons)}")
    homes = _relocated_homes(originals, workdir)
    for home in homes.values():
        _remove_previous(home)
    moves = {str(originals[role]): str(homes[role]) for role in homes}
    return Placement("relocate", with_base_home(manifest, homes), moves)


def release(placement: Placement, workdir: Path, *, output_dir: Path | None = None) -> None:
    """Remove this job's original-path copies (its folders; an adopted folder is emptied).

    A copy that holds the job's output dir is kept (its outputs would go with it), and says so.
    """
    kept = tuple(
        item
        for item in placement.owned
        if output_dir is not None and output_dir.is_relative_to(item.path)
    )
    for item in kept:
        say("cleaning up", f"{item.path} is kept: it holds the output dir {output_dir}")
    _release(tuple(item for item in placement.owned if item not in kept))
    for fd in placement.locks:  # only now: a job starting meanwhile must not adopt them
        os.close(fd)
    (workdir / RECORD).unlink(missing_ok=True)


def _layers(manifest: ManifestPlan) -> dict[LayerRole, LayerPlan]:
    by_role: dict[LayerRole, LayerPlan] = {}
    check_base_layers(manifest)
    for layer in manifest.layers:
        if layer.role == LayerRole.base:
            continue  # inside the venv's home (base_packages.py): not a home of its own
        first = by_role.get(layer.role)
        # The code layer may come in parts (format_version 3), all from the same folder.
        part = layer.role == LayerRole.code and manifest.format_version >= 3
        if first is not None and not (part and first.source_path == layer.source_path):
            raise ManifestInvalid(f"the manifest has two {layer.role.value} layers", field="layers")
        if not os.path.isabs(layer.source_path) or ".." in Path(layer.source_path).parts:
            raise ManifestInvalid(
                f"the {layer.role.value} layer's source_path {layer.source_path!r} is not an "
                "absolute path without '..'",
                field="layers.source_path",
            )
        by_role.setdefault(layer.role, layer)
    if LayerRole.code not in by_role:
        raise ManifestInvalid("the manifest has no code layer", field="layers")
    if (LayerRole.venv in by_role) != (manifest.venv is not None):
        raise ManifestInvalid("the manifest's venv facts and venv layer disagree", field="venv")
    return by_role


def _relocated_homes(originals: dict[LayerRole, Path], workdir: Path) -> dict[LayerRole, Path]:
    code = workdir / "code"
    homes = {LayerRole.code: code}
    venv = originals.get(LayerRole.venv)
    if venv is not None:
        project = originals[LayerRole.code]
        # A venv inside the project keeps its place relative to the code.
        inside = venv.is_relative_to(project)
        homes[LayerRole.venv] = code / venv.relative_to(project) if inside else workdir / "venv"
    return homes


def _outermost(originals: dict[LayerRole, Path]) -> list[Path]:
    """The homes not inside another one (a venv inside the project comes with the code)."""
    paths = sorted(set(originals.values()), key=lambda p: len(p.parts))
    kept: list[Path] = []
    for path in paths:
        if not any(path.is_relative_to(other) for other in kept):
            kept.append(path)
    return kept


# --------------------------------------------------------------------------- may it go there?


def _unavailable(path: Path, trust: bool) -> str | None:
    """Why ``path`` cannot receive a layer, or None when it can."""
    if os.path.lexists(path):
        if path.is_symlink() or not path.is_dir():
            return "exists and is not a folder"
        if any(path.iterdir()):
            return "is not empty"
        if not os.access(path, os.W_OK | os.X_OK):
            return "is not writable"
    else:
        parent = path.parent
        while not parent.exists():
            parent = parent.parent
        if not (parent.is_dir() and os.access(parent, os.W_OK | os.X_OK)):
            return f"cannot be created ({parent} is not writable)"
    return None if trust else _others_could_change(path)


def _others_could_change(path: Path) -> str | None:
    """Why another local user could change what is extracted at ``path``, or None.

    Checked on the path as written and on where its links lead (``os.path.realpath``).
    """
    why = _chain_problem(path)
    if why is None:
        real = Path(os.path.realpath(path))
        if real != path:
            why = _chain_problem(real)
    return why


def _chain_problem(path: Path) -> str | None:
    trusted = {os.geteuid(), 0}
    folders = [Path(*path.parts[:depth]) for depth in range(1, len(path.parts) + 1)]
    for index, folder in enumerate(folders):
        try:
            st = os.lstat(folder)
        except FileNotFoundError:
            return None  # the rest is created by this job, in a folder only it may change
        except OSError as exc:
            return f"cannot be checked ({folder}: {exc.strerror})"
        if st.st_uid not in trusted:
            return f"is not private to this job's user ({folder} belongs to uid {st.st_uid})"
        if stat.S_ISLNK(st.st_mode):
            continue  # a link's own mode means nothing; where it leads is checked separately
        open_to_others = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        is_target = index == len(folders) - 1
        # Sticky (/tmp): others may add entries but not rename or remove ours, and the next
        # folder down must be ours. The target itself must be closed: new files would be code.
        if open_to_others and (is_target or not st.st_mode & stat.S_ISVTX):
            return f"is not private to this job's user ({folder} is writable by others)"
    return None


# --------------------------------------------------------------------------- this job's copies


def _claim(
    homes: list[Path], workdir: Path, trust: bool
) -> tuple[tuple[Owned, ...], tuple[int, ...]] | str:
    """Create the homes (folder by folder, never adopting one that appeared meanwhile), lock
    and record them; or the reason they cannot be used, with what was made removed again.

    The lock (``flock`` on the home folder, held until :func:`release`) keeps two jobs of one
    user on one node (a sweep) from both taking the same empty folder.
    """
    owned: list[Owned] = []
    locks: list[int] = []
    try:
        for home in homes:
            if home.is_dir() and not home.is_symlink():
                owned.append(_owned(home, created=False))  # checked empty above
            else:
                owned.append(_owned(_make_folders(home), created=True))
            locks.append(_lock(home, owned))
            # Checked again now that they exist: nothing may have moved in between.
            if not trust and (why := _others_could_change(home)):
                raise _Refused(f"{home} {why}")
        _record(workdir, owned)
    except (_Refused, OSError) as exc:
        _release(tuple(owned))
        for fd in locks:
            os.close(fd)
        if isinstance(exc, _Refused):
            return str(exc)
        return f"{exc.filename or homes[0]} cannot be used ({exc.strerror or exc})"
    return tuple(owned), tuple(locks)


def _lock(home: Path, owned: list[Owned]) -> int:
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(home, flags)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        owned.pop()  # another job holds it: not ours to remove
        raise _Refused(f"{home} is in use by another job") from None
    return fd


class _Refused(Exception):
    pass


def _make_folders(home: Path) -> Path:
    """mkdir each missing folder down to ``home``; the outermost one made."""
    missing = [home]
    while not os.path.lexists(missing[-1].parent):
        missing.append(missing[-1].parent)
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o755)
        except FileExistsError:
            raise _Refused(f"{folder} appeared while j2c-unpack was creating it") from None
        # Whatever the umask: no one else may write into it.
        os.chmod(folder, stat.S_IMODE(os.lstat(folder).st_mode) & ~0o022)
    return missing[-1]


def _owned(path: Path, *, created: bool) -> Owned:
    st = os.lstat(path)
    return Owned(str(path), st.st_dev, st.st_ino, created)


def _record(workdir: Path, owned: list[Owned]) -> None:
    entries = [o.__dict__ for o in owned]
    temporary = workdir / f"{RECORD}.part"
    temporary.write_text(json.dumps(entries))
    temporary.replace(workdir / RECORD)


def _release_recorded(workdir: Path) -> None:
    """A previous run with this workdir was killed before it could remove its copies."""
    try:
        entries = json.loads((workdir / RECORD).read_text())
        owned = tuple(Owned(**entry) for entry in entries)
    except FileNotFoundError:
        return
    except (OSError, ValueError, TypeError) as exc:
        warn("placing", f"ignoring an unreadable {RECORD}: {exc}")
        return
    say("placing", "removing the original-path copies a previous run of this workdir left")
    _release(owned)
    (workdir / RECORD).unlink(missing_ok=True)


def _release(owned: tuple[Owned, ...]) -> None:
    for item in owned:
        path = Path(item.path)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        if (st.st_dev, st.st_ino) != (item.dev, item.ino) or not stat.S_ISDIR(st.st_mode):
            warn("cleaning up", f"{path} is no longer the folder this job made: left alone")
            continue
        try:
            if item.created:
                _rmtree(path)
            else:
                for child in path.iterdir():
                    _remove_tree(child)
        except (OSError, RecursionError) as exc:
            warn("cleaning up", f"could not remove everything in {path}: {exc}")


def _remove_tree(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        _rmtree(path)
    else:
        path.unlink()


def _rmtree(path: Path) -> None:
    """rmtree that also removes what the job made read-only (``chmod -w`` on a folder)."""

    def writable_parent(function: Callable[[str], object], name: str, _: object) -> None:
        os.chmod(os.path.dirname(name), stat.S_IRWXU)
        function(name)

    shutil.rmtree(path, onerror=writable_parent)


def _remove_previous(home: Path) -> None:
    """Remove a previous run's layer folder inside the (marked) workdir."""
    try:
        if home.is_symlink() or home.is_file():
            home.unlink()
        elif home.exists():
            shutil.rmtree(home)
    except OSError as exc:
        raise LocalIOError(f"cannot clear {home}: {exc.strerror or exc}") from None
