"""The stat walk: what goes into a layer, in archive order, and what stays out and why.

One ``lstat`` per entry and no file contents: the result feeds the preflight plan, the
fingerprint (an unchanged layer is recognised from it) and the tar writer. Symlinks are never
followed; entries are sorted by name within each folder (depth first), so the same tree always
gives the same order.
"""

from __future__ import annotations

import os
import re
import stat
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from ..models import LayerRole
from .ignore import VENV_JUNK_FILES, CodeRules, IgnoreLevel
from .models import ExcludeRule

FILE, DIR, SYMLINK = "file", "dir", "symlink"
_CACHEDIR_SIGNATURE = b"Signature: 8a477f597d28d172789f06886806bc55"
# The venv's own interpreter links point at the base interpreter on purpose; j2c-unpack
# re-points them at the container's interpreter.
_VENV_INTERPRETER_LINK = re.compile(r"^bin/python[0-9.]*$")


@dataclass(slots=True)
class Entry:
    rel: str  # '/'-separated, relative to the layer root
    kind: str  # FILE, DIR or SYMLINK
    mode: int  # permission bits
    size: int
    mtime_ns: int
    link: str = ""  # symlink target


@dataclass
class ScannedLayer:
    role: LayerRole
    root: Path
    entries: list[Entry] = field(default_factory=list)
    excluded: dict[ExcludeRule, list[str]] = field(default_factory=lambda: defaultdict(list))
    unreadable: list[str] = field(default_factory=list)

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


class _Walker:
    def __init__(
        self,
        layer: ScannedLayer,
        rules: CodeRules | None,
        skip_dir_ids: set[tuple[int, int]],
    ) -> None:
        self.layer = layer
        self.rules = rules  # None for the venv layer
        self.skip_dir_ids = skip_dir_ids
        self.real_root = os.path.realpath(layer.root)

    def walk(self) -> ScannedLayer:
        self._visit(str(self.layer.root), "", [], include_only=False)
        return self.layer

    def _exclude(self, rule: ExcludeRule, rel: str) -> None:
        self.layer.excluded[rule].append(rel)

    def _directory_rule(self, path: str, st: os.stat_result) -> ExcludeRule | None:
        if (st.st_dev, st.st_ino) in self.skip_dir_ids:
            return ExcludeRule.venv
        if self.rules is None:
            return None
        if os.path.isfile(os.path.join(path, "pyvenv.cfg")):
            return ExcludeRule.nested_venv
        if _is_cache_dir(path):
            return ExcludeRule.cache_dir
        return None

    def _visit(
        self, path: str, rel_dir: str, levels: list[IgnoreLevel], include_only: bool
    ) -> None:
        try:
            with os.scandir(path) as iterator:
                children = sorted(iterator, key=lambda child: child.name)
        except OSError:
            self.layer.unreadable.append(rel_dir or ".")
            return
        rules = self.rules
        if rules is not None:
            try:
                level = CodeRules.read_level(
                    Path(path), rel_dir + "/" if rel_dir else "", {c.name for c in children}
                )
            except OSError as exc:
                self.layer.unreadable.append(os.path.relpath(exc.filename, self.layer.root))
                level = None
            if level is not None:
                levels = [*levels, level]
        for child in children:
            name = child.name
            rel = f"{rel_dir}/{name}" if rel_dir else name
            try:
                name.encode()
            except UnicodeEncodeError:
                self._exclude(ExcludeRule.bad_name, rel.encode(errors="replace").decode())
                continue
            try:
                st = child.stat(follow_symlinks=False)
            except OSError:
                self.layer.unreadable.append(rel)
                continue
            mode = st.st_mode
            is_dir = stat.S_ISDIR(mode)
            forced = rules is not None and rules.forced(rel)
            if (
                include_only
                and not forced
                and not (is_dir and rules and rules.leads_to_include(rel))
            ):
                continue
            if is_dir:
                structural = self._directory_rule(child.path, st)
                if structural is not None:
                    self._exclude(structural, rel + "/")
                    continue
            elif not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
                self._exclude(ExcludeRule.special_file, rel)
                continue
            rule = self._rule(rel, name, is_dir, levels)
            descend_for_include = False
            if rule is not None:
                self._exclude(rule, rel + "/" if is_dir else rel)
                if not (is_dir and rules is not None and rules.leads_to_include(rel)):
                    continue
                descend_for_include = True  # only for what ``includes`` names inside it
            if stat.S_ISLNK(mode):
                self._add_symlink(child.path, rel, st)
            elif is_dir:
                self.layer.entries.append(Entry(rel, DIR, stat.S_IMODE(mode), 0, st.st_mtime_ns))
                self._visit(child.path, rel, levels, include_only or descend_for_include)
            else:
                if not os.access(child.path, os.R_OK):
                    self.layer.unreadable.append(rel)
                    continue
                self.layer.entries.append(
                    Entry(rel, FILE, stat.S_IMODE(mode), st.st_size, st.st_mtime_ns)
                )

    def _rule(
        self, rel: str, name: str, is_dir: bool, levels: list[IgnoreLevel]
    ) -> ExcludeRule | None:
        if self.rules is not None:
            return self.rules.rule_for(rel, name, is_dir, levels)
        return ExcludeRule.default if not is_dir and name in VENV_JUNK_FILES else None

    def _add_symlink(self, path: str, rel: str, st: os.stat_result) -> None:
        try:
            target = os.readlink(path)
        except OSError:
            self.layer.unreadable.append(rel)
            return
        allowed = self.rules is None and _VENV_INTERPRETER_LINK.match(rel)
        if not allowed and _link_escapes(path, rel, target, self.real_root):
            self._exclude(ExcludeRule.symlink_escape, f"{rel} -> {target}")
            return
        self.layer.entries.append(
            Entry(rel, SYMLINK, stat.S_IMODE(st.st_mode), 0, st.st_mtime_ns, target)
        )


def scan_code(root: Path, rules: CodeRules, venv_root: Path | None) -> ScannedLayer:
    """Walk the project; the shipped venv, when nested, is left to the venv layer."""
    skip: set[tuple[int, int]] = set()
    if venv_root is not None:
        venv_stat = os.stat(venv_root)
        skip.add((venv_stat.st_dev, venv_stat.st_ino))
    return _Walker(ScannedLayer(LayerRole.code, root), rules, skip).walk()


def scan_venv(root: Path) -> ScannedLayer:
    return _Walker(ScannedLayer(LayerRole.venv, root), None, set()).walk()
