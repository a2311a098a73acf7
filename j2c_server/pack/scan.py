"""The walk: what goes into a layer, in archive order, and what stays out and why.

One ``lstat`` per entry; symlinks are never followed; entries are sorted by name within each
folder (depth first), so the same tree always gives the same order. The walk is iterative (an
explicit stack) and refuses trees deeper than :data:`MAX_DEPTH` with a ``PackError``.

Besides names, small files are looked into for secrets (:mod:`.secrets`); those verdicts are
cached by stat, so an unchanged tree is a stat walk again on the next scan.
"""

from __future__ import annotations

import os
import re
import stat
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from j2c_server.core.errors import PackError
from j2c_server.pack.ignore import CodeRules, IgnoreLevel, VenvRules, secret_name
from j2c_server.pack.models import ExcludeRule
from j2c_server.pack.secrets import PackagedFiles, VerdictCache
from j2c_server.wire.manifest import LayerRole

FILE, DIR, SYMLINK = "file", "dir", "symlink"
_CACHEDIR_SIGNATURE = b"Signature: 8a477f597d28d172789f06886806bc55"
# The venv's own interpreter links point at the base interpreter on purpose; j2c-unpack
# re-points them at the container's interpreter.
_VENV_INTERPRETER_LINK = re.compile(r"^bin/python[0-9.]*$")
# Folders below the layer root. Real projects stay far below; j2c-unpack must accept at least
# this many (and refuses deeper archives itself).
MAX_DEPTH = 256
_FIELD = {LayerRole.code: "code_path", LayerRole.venv: "venv_path"}


@dataclass(slots=True)
class Entry:
    rel: str  # '/'-separated, relative to the layer root
    kind: str  # FILE, DIR or SYMLINK
    mode: int  # permission bits
    size: int
    mtime_ns: int
    link: str = ""  # symlink target
    dev: int = 0  # device and inode seen by the scan: the tar writer reads only that file
    ino: int = 0


@dataclass
class ScannedLayer:
    role: LayerRole
    root: Path
    entries: list[Entry] = field(default_factory=list)
    excluded: dict[ExcludeRule, list[str]] = field(default_factory=lambda: defaultdict(list))
    unreadable: list[str] = field(default_factory=list)
    # excluded path -> why, where the rule has several reasons (secrets: name or content)
    reasons: dict[str, str] = field(default_factory=dict)
    # shipped because includes name them, although they look like secrets: path -> why
    included_secrets: dict[str, str] = field(default_factory=dict)
    unchecked: int = 0  # small files not looked into for secrets: over the scan's read budget
    # what is computed once from the entries (fingerprints, the walk): entries never change
    # after the scan, and a kept venv scan (:mod:`.venv_scans`) is handed out again. Not an
    # init field: ``dataclasses.replace`` (parts, big files) starts the new layer without it.
    memo: dict[object, object] = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def files(self) -> list[Entry]:
        return [entry for entry in self.entries if entry.kind == FILE]

    @property
    def bytes(self) -> int:
        return sum(entry.size for entry in self.entries if entry.kind == FILE)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _link_escapes(link_path: str, rel: str, target: str, real_root: str) -> bool:
    """A link escapes when its target is absolute, climbs out lexically, or resolves outside."""
    if os.path.isabs(target):
        return True
    lexical = os.path.normpath(os.path.join(os.path.dirname(rel), target))
    if lexical == ".." or lexical.startswith("../"):
        return True
    return not _inside(os.path.realpath(link_path), real_root)


def _is_cache_dir(path: str) -> bool:
    try:
        with open(os.path.join(path, "CACHEDIR.TAG"), "rb") as tag:
            return tag.read(len(_CACHEDIR_SIGNATURE)) == _CACHEDIR_SIGNATURE
    except OSError:
        return False


@dataclass
class _Frame:
    """One folder being walked: its sorted children and how far the walk got."""

    path: str
    rel: str
    levels: list[IgnoreLevel]
    include_only: bool
    children: list[os.DirEntry[str]]
    next: int = 0


_EUID = os.geteuid()
_GROUPS = frozenset([os.getegid(), *os.getgroups()])


def _readable(st: os.stat_result) -> bool:
    """Read permission from the stat already taken (``os.access`` is one more syscall per file,
    a tenth of a large venv's scan); an ACL that refuses more is caught when the file is read."""
    if _EUID == 0:
        return True
    if st.st_uid == _EUID:
        return bool(st.st_mode & stat.S_IRUSR)
    if st.st_gid in _GROUPS:
        return bool(st.st_mode & stat.S_IRGRP)
    return bool(st.st_mode & stat.S_IROTH)


class _Walker:
    def __init__(
        self,
        layer: ScannedLayer,
        rules: CodeRules | VenvRules,
        skip_dir_ids: set[tuple[int, int]],
        never_ids: set[tuple[int, int]],
        verdicts: VerdictCache,
    ) -> None:
        self.layer = layer
        self.rules = rules
        self.code_rules = rules if isinstance(rules, CodeRules) else None
        self.skip_dir_ids = skip_dir_ids
        self.never_ids = never_ids
        self.verdicts = verdicts
        self.packaged = PackagedFiles(layer.root) if self.code_rules is None else None
        self.real_root = os.path.realpath(layer.root)

    def walk(self) -> ScannedLayer:
        stack: list[_Frame] = []
        root = self._open(str(self.layer.root), "", [], include_only=False)
        if root is not None:
            stack.append(root)
        while stack:
            frame = stack[-1]
            if frame.next == len(frame.children):
                stack.pop()
                continue
            child = frame.children[frame.next]
            frame.next += 1
            below = self._child(frame, child)
            if below is not None:
                if len(stack) >= MAX_DEPTH:
                    shown = below.rel if len(below.rel) <= 80 else below.rel[:80] + "..."
                    raise PackError(
                        f"{shown} in {self.layer.root} is more than {MAX_DEPTH} folders deep: "
                        f"j2c packs at most {MAX_DEPTH} levels",
                        field=_FIELD[self.layer.role],
                        hint="exclude that folder (excludes or .j2cignore)",
                    )
                stack.append(below)
        self.verdicts.save()
        self.layer.unchecked = self.verdicts.unchecked
        return self.layer

    def _exclude(self, rule: ExcludeRule, rel: str, reason: str | None = None) -> None:
        self.layer.excluded[rule].append(rel)
        if reason is not None:
            self.layer.reasons[rel] = reason

    def _directory_rule(self, path: str, st: os.stat_result) -> ExcludeRule | None:
        if (st.st_dev, st.st_ino) in self.skip_dir_ids:
            return ExcludeRule.venv
        if self.code_rules is None:
            return None
        if os.path.isfile(os.path.join(path, "pyvenv.cfg")):
            return ExcludeRule.nested_venv
        if _is_cache_dir(path):
            return ExcludeRule.cache_dir
        return None

    def _open(
        self, path: str, rel_dir: str, levels: list[IgnoreLevel], include_only: bool
    ) -> _Frame | None:
        try:
            with os.scandir(path) as iterator:
                children = sorted(iterator, key=lambda child: child.name)
        except OSError:
            self.layer.unreadable.append(rel_dir or ".")
            return None
        if self.code_rules is not None:
            try:
                level = CodeRules.read_level(
                    Path(path), rel_dir + "/" if rel_dir else "", {c.name for c in children}
                )
            except OSError as exc:
                self.layer.unreadable.append(os.path.relpath(exc.filename, self.layer.root))
                level = None
            if level is not None:
                levels = [*levels, level]
        return _Frame(path, rel_dir, levels, include_only, children)

    def _child(self, frame: _Frame, child: os.DirEntry[str]) -> _Frame | None:
        """Judge one child; returns the frame to walk next when it is a folder to descend."""
        rules = self.rules
        name = child.name
        rel = f"{frame.rel}/{name}" if frame.rel else name
        try:
            name.encode()
        except UnicodeEncodeError:
            self._exclude(ExcludeRule.bad_name, rel.encode(errors="replace").decode())
            return None
        try:
            st = child.stat(follow_symlinks=False)
        except OSError:
            self.layer.unreadable.append(rel)
            return None
        mode = st.st_mode
        is_dir = stat.S_ISDIR(mode)
        if (st.st_dev, st.st_ino) in self.never_ids:
            self._exclude(ExcludeRule.j2c_data, rel + "/" if is_dir else rel)
            return None
        forced = rules.forced(rel)
        if frame.include_only and not forced and not (is_dir and rules.leads_to_include(rel)):
            return None
        if is_dir:
            structural = self._directory_rule(child.path, st)
            if structural is not None:
                self._exclude(structural, rel + "/")
                return None
        elif not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
            self._exclude(ExcludeRule.special_file, rel)
            return None
        rule = self._rule(child.path, rel, name, is_dir, st, frame.levels)
        descend_for_include = False
        if rule is not None:
            key = rel + "/" if is_dir else rel
            reason = None
            if rule is ExcludeRule.secret:
                reason = f"name '{secret_name(rel, is_dir, venv=self.code_rules is None)}'"
            self._exclude(rule, key, reason)
            if not (is_dir and rules.leads_to_include(rel)):
                return None
            descend_for_include = True  # only for what ``includes`` names inside it
        elif forced:
            pattern = secret_name(rel, is_dir, venv=self.code_rules is None)
            if pattern is not None and not self._packaged(child.path, is_dir, st):
                self.layer.included_secrets.setdefault(rel, f"name '{pattern}'")
        if stat.S_ISLNK(mode):
            self._add_symlink(child.path, rel, st)
        elif is_dir:
            self.layer.entries.append(Entry(rel, DIR, stat.S_IMODE(mode), 0, st.st_mtime_ns))
            return self._open(
                child.path, rel, frame.levels, frame.include_only or descend_for_include
            )
        else:
            self._add_file(child.path, rel, name, st, forced)
        return None

    def _packaged(self, path: str, is_dir: bool, st: os.stat_result) -> bool:
        if self.packaged is None:
            return False
        if is_dir:
            return self.packaged.has_dir(path)
        return self.packaged.has_file(path, st.st_mtime_ns)

    def _rule(
        self,
        path: str,
        rel: str,
        name: str,
        is_dir: bool,
        st: os.stat_result,
        levels: list[IgnoreLevel],
    ) -> ExcludeRule | None:
        if self.code_rules is not None:
            return self.code_rules.rule_for(rel, name, is_dir, levels)
        assert isinstance(self.rules, VenvRules)
        rule = self.rules.rule_for(rel, name, is_dir)
        if rule is ExcludeRule.secret and self._packaged(path, is_dir, st):
            return None  # a package's own file (e.g. a test key in tornado): not the user's
        return rule

    def _add_file(self, path: str, rel: str, name: str, st: os.stat_result, forced: bool) -> None:
        if not _readable(st):
            self.layer.unreadable.append(rel)
            return
        packaged = self.packaged
        skip = None
        if packaged is not None:
            skip = lambda: packaged.has_file(path, st.st_mtime_ns)  # noqa: E731 - called lazily
        try:
            reason = self.verdicts.check(path, name, st, skip)
        except OSError:
            self.layer.unreadable.append(rel)
            return
        if reason is not None:
            if not forced:
                self._exclude(ExcludeRule.secret, rel, reason)
                return
            self.layer.included_secrets.setdefault(rel, reason)
        mode = stat.S_IMODE(st.st_mode)
        entry = Entry(rel, FILE, mode, st.st_size, st.st_mtime_ns, dev=st.st_dev, ino=st.st_ino)
        self.layer.entries.append(entry)

    def _add_symlink(self, path: str, rel: str, st: os.stat_result) -> None:
        try:
            target = os.readlink(path)
        except OSError:
            self.layer.unreadable.append(rel)
            return
        allowed = self.code_rules is None and _VENV_INTERPRETER_LINK.match(rel)
        if not allowed and _link_escapes(path, rel, target, self.real_root):
            self._exclude(ExcludeRule.symlink_escape, f"{rel} -> {target}")
            return
        self.layer.entries.append(
            Entry(rel, SYMLINK, stat.S_IMODE(st.st_mode), 0, st.st_mtime_ns, target)
        )


def _ids(paths: list[Path]) -> set[tuple[int, int]]:
    ids: set[tuple[int, int]] = set()
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue  # not there (yet): nothing to leave out
        ids.add((st.st_dev, st.st_ino))
    return ids


def scan_code(
    root: Path,
    rules: CodeRules,
    venv_root: Path | None,
    *,
    never_pack: list[Path] | None = None,
    verdicts: VerdictCache | None = None,
) -> ScannedLayer:
    """Walk the project; the shipped venv, when nested, is left to the venv layer."""
    skip = _ids([venv_root]) if venv_root is not None else set()
    layer = ScannedLayer(LayerRole.code, root)
    cache = verdicts or VerdictCache(None, root)
    return _Walker(layer, rules, skip, _ids(never_pack or []), cache).walk()


def scan_venv(
    root: Path,
    rules: VenvRules | None = None,
    *,
    never_pack: list[Path] | None = None,
    verdicts: VerdictCache | None = None,
) -> ScannedLayer:
    layer = ScannedLayer(LayerRole.venv, root)
    cache = verdicts or VerdictCache(None, root)
    return _Walker(layer, rules or VenvRules([]), set(), _ids(never_pack or []), cache).walk()
