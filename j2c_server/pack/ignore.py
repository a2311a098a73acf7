"""Which paths of a layer stay out, and which rule says so.

Code layer, first match wins:

1. ``includes`` (explicit opt-in by the user) keep a path whatever else matches;
2. built-in junk (``.git``, ``__pycache__``, ``.ipynb_checkpoints``, editor and OS files);
3. secrets (``.env*``, private keys, cloud and tool credentials, history files), by name;
4. gitignore-syntax patterns: the user's ``excludes`` beat ``.j2cignore`` files, which beat
   ``.gitignore`` files; within each kind a deeper file beats a shallower one, as in git.

Venv layer (:class:`VenvRules`): ``includes`` inside the venv, OS junk, and the same secret names
except key and certificate suffixes (``certifi/cacert.pem`` must ship; a private key saved as
``.pem`` is found by its content, see :mod:`.secrets`). A file a package installed (listed in its
``RECORD``, unchanged since) is the package's own and never a secret (see ``PackagedFiles``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pathspec import GitIgnoreSpec

from j2c_server.core.errors import PackError
from j2c_server.core.secret_rules import DIR_TOO, JUNK_DIRS, KEY_FILE_PATTERNS, SECRET_PATTERNS
from j2c_server.pack.models import ExcludeRule

JUNK_FILES = frozenset({".DS_Store", "Thumbs.db", "desktop.ini", ".directory"})
JUNK_SUFFIXES = (".swp", ".swo", "~")
VENV_JUNK_FILES = JUNK_FILES

IGNORE_FILES = (".gitignore", ".j2cignore")


def _spec(lines: Iterable[str]) -> GitIgnoreSpec:
    """Compile gitignore lines; like git, a line that is not a valid pattern is skipped."""
    lines = list(lines)
    try:
        return GitIgnoreSpec.from_lines(lines)
    except ValueError:
        return GitIgnoreSpec.from_lines([line for line in lines if _valid(line)])


def _valid(line: str) -> bool:
    try:
        GitIgnoreSpec.from_lines([line])
    except ValueError:
        return False
    return True


def _glob(pattern: str) -> str:
    return "".join("[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c) for c in pattern)


class _SecretNames:
    """Secret patterns matched fast: one regex over the entry's own name for the single-name
    patterns (almost all), gitignore matching only for names that end a multi-folder pattern.
    (pathspec tries every pattern in turn: ~150 us an entry, too slow for a 13k-file venv.)"""

    def __init__(self, patterns: tuple[str, ...]) -> None:
        self.patterns = patterns
        files: list[str] = []
        dirs: list[str] = []
        self.tails: dict[str, list[tuple[str, GitIgnoreSpec]]] = {}
        for pattern in patterns:
            body = pattern.rstrip("/")
            if "/" in body:
                tail = body.rsplit("/", 1)[1]
                self.tails.setdefault(tail, []).append((pattern, _spec([pattern])))
                continue
            if not pattern.endswith("/"):
                files.append(body)
            if pattern.endswith("/") or pattern in DIR_TOO:
                dirs.append(body)
        self.file_re = re.compile("|".join(_glob(g) for g in files))
        self.dir_re = re.compile("|".join(_glob(g) for g in dirs))
        # (pattern, regex over the name, applies to files, applies to folders)
        self.single: list[tuple[str, re.Pattern[str], bool, bool]] = []
        for pattern in patterns:
            if "/" not in pattern.rstrip("/"):
                to_dirs = pattern.endswith("/") or pattern in DIR_TOO
                regex = re.compile(_glob(pattern.rstrip("/")))
                self.single.append((pattern, regex, not pattern.endswith("/"), to_dirs))

    def matches(self, rel: str, name: str, is_dir: bool) -> bool:
        """``rel`` itself (its parent folders are judged on their own) matches a pattern."""
        if (self.dir_re if is_dir else self.file_re).fullmatch(name):
            return True
        return self._tail(rel, name, is_dir) is not None

    def _tail(self, rel: str, name: str, is_dir: bool) -> str | None:
        key = rel + "/" if is_dir else rel
        for pattern, spec in self.tails.get(name, ()):
            if spec.check_file(key).include and (is_dir or not pattern.endswith("/")):
                return pattern
        return None

    def _which(self, rel: str, name: str, is_dir: bool) -> str | None:
        for pattern, regex, on_files, on_dirs in self.single:
            if (on_dirs if is_dir else on_files) and regex.fullmatch(name):
                return pattern
        return self._tail(rel, name, is_dir)

    def pattern(self, rel: str, is_dir: bool) -> str | None:
        """The pattern matching ``rel`` or a folder above it (slower: for reports)."""
        parts = rel.split("/")
        for index, name in enumerate(parts):
            last = index == len(parts) - 1
            found = self._which("/".join(parts[: index + 1]), name, is_dir if last else True)
            if found is not None:
                return found
        return None


_CODE_SECRETS = _SecretNames((*SECRET_PATTERNS, *KEY_FILE_PATTERNS))
_VENV_SECRETS = _SecretNames(SECRET_PATTERNS)


def secret_name(rel: str, is_dir: bool, *, venv: bool = False) -> str | None:
    """The secret name pattern that matches ``rel`` (or a folder above it), or None."""
    return (_VENV_SECRETS if venv else _CODE_SECRETS).pattern(rel, is_dir)


@dataclass(frozen=True)
class IgnoreLevel:
    """The ignore files of one directory, matched against paths relative to that directory."""

    prefix: str  # "" for the root, else "sub/dir/"
    gitignore: GitIgnoreSpec | None
    j2cignore: GitIgnoreSpec | None


def _verdict(specs: list[tuple[str, GitIgnoreSpec]], rel: str) -> bool | None:
    """True: excluded, False: re-included by a '!' pattern, None: no pattern matched."""
    for prefix, spec in reversed(specs):
        result = spec.check_file(rel[len(prefix) :]).include
        if result is not None:
            return result
    return None


class _Includes:
    """Layer-relative paths the user opted in (``includes``): they ship whatever else matches."""

    def __init__(self, includes: list[str]) -> None:
        self._includes = frozenset(includes)

    def forced(self, rel: str) -> bool:
        """The user named this path (or a folder above it) in ``includes``."""
        if not self._includes:
            return False
        return rel in self._includes or any(rel.startswith(inc + "/") for inc in self._includes)

    def leads_to_include(self, rel: str) -> bool:
        """Some included path lies below this excluded folder: walk into it for that path."""
        return bool(self._includes) and any(inc.startswith(rel + "/") for inc in self._includes)


class VenvRules(_Includes):
    """The venv layer's rules: OS junk and secret names (see the module docstring)."""

    def rule_for(self, rel: str, name: str, is_dir: bool) -> ExcludeRule | None:
        if self._includes and self.forced(rel):
            return None
        if not is_dir and name in VENV_JUNK_FILES:
            return ExcludeRule.default
        if _VENV_SECRETS.matches(rel, name, is_dir):
            return ExcludeRule.secret
        return None


class CodeRules(_Includes):
    """The code layer's rules; ``levels`` is the stack of ignore files from the root down to the
    folder being walked, so every level applies to the paths checked against it."""

    def __init__(self, excludes: list[str], includes: list[str]) -> None:
        bad = [pattern for pattern in excludes if not _valid(pattern)]
        if bad:
            raise PackError(f"exclude pattern {bad[0]!r} is not valid", field="excludes")
        super().__init__(includes)
        self._excludes = _spec(excludes) if excludes else None

    @staticmethod
    def read_level(directory: Path, prefix: str, names: set[str]) -> IgnoreLevel | None:
        specs: dict[str, GitIgnoreSpec | None] = {}
        for filename in IGNORE_FILES:
            path = directory / filename
            if filename in names and path.is_file():
                specs[filename] = _spec(path.read_text(errors="replace").splitlines())
        if not specs:
            return None
        return IgnoreLevel(prefix, specs.get(".gitignore"), specs.get(".j2cignore"))

    def rule_for(
        self, rel: str, name: str, is_dir: bool, levels: list[IgnoreLevel]
    ) -> ExcludeRule | None:
        """The rule that excludes ``rel`` (a '/'-separated project-relative path), or None."""
        if self._includes and self.forced(rel):
            return None
        if is_dir and name in JUNK_DIRS:
            return ExcludeRule.default
        if not is_dir and (name in JUNK_FILES or name.endswith(JUNK_SUFFIXES)):
            return ExcludeRule.default
        if _CODE_SECRETS.matches(rel, name, is_dir):
            return ExcludeRule.secret
        key = rel + "/" if is_dir else rel
        if self._excludes is not None:
            result = self._excludes.check_file(key).include
            if result is not None:
                return ExcludeRule.exclude if result else None
        j2c = [(level.prefix, level.j2cignore) for level in levels if level.j2cignore]
        git = [(level.prefix, level.gitignore) for level in levels if level.gitignore]
        for rule, specs in ((ExcludeRule.j2cignore, j2c), (ExcludeRule.gitignore, git)):
            result = _verdict(specs, key) if specs else None
            if result is not None:
                return rule if result else None
        return None
