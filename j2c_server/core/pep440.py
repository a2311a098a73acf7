"""PEP 440 versions and specifiers, standard library only: what ``j2c-unpack`` needs to judge
"scipy needs numpy>=1.25.2; this image has 1.24.2" inside a job whose image has no ``packaging``.

The lab uses ``packaging`` (image/diff.py); a test checks this module against it on a table of
versions and specifiers. Pre-releases are accepted wherever ``packaging`` would accept them
with ``prereleases=True`` (what the lab's check does): the question is "does the installed
version satisfy it", not "would pip pick it".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_VERSION = re.compile(
    r"""^\s*v?
    (?:(?P<epoch>[0-9]+)!)?
    (?P<release>[0-9]+(?:\.[0-9]+)*)
    (?:[-_.]?(?P<pre_l>alpha|a|beta|b|preview|pre|c|rc)[-_.]?(?P<pre_n>[0-9]+)?)?
    (?:(?:-(?P<post_n1>[0-9]+))|(?:[-_.]?(?P<post_l>post|rev|r)[-_.]?(?P<post_n2>[0-9]+)?))?
    (?:[-_.]?(?P<dev_l>dev)[-_.]?(?P<dev_n>[0-9]+)?)?
    (?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?
    \s*$""",
    re.VERBOSE | re.IGNORECASE,
)
_PRE = {"a": "a", "alpha": "a", "b": "b", "beta": "b", "c": "rc", "rc": "rc", "pre": "rc"}
_PRE["preview"] = "rc"
_CLAUSE = re.compile(r"^\s*(===|~=|==|!=|<=|>=|<|>)\s*(\S+)\s*$")
_PHASE = {"a": 0, "b": 1, "rc": 2}


class InvalidVersion(ValueError):
    pass


@dataclass(frozen=True)
class Version:
    epoch: int
    release: tuple[int, ...]
    pre: tuple[str, int] | None
    post: int | None
    dev: int | None
    local: str | None

    @property
    def is_prerelease(self) -> bool:
        return self.pre is not None or self.dev is not None

    @property
    def public(self) -> Version:
        return Version(self.epoch, self.release, self.pre, self.post, self.dev, None)

    @property
    def base(self) -> tuple[int, tuple[int, ...]]:
        return self.epoch, _trimmed(self.release)

    def key(self) -> tuple[object, ...]:
        """Sorts as PEP 440 orders: a final release after its pre-releases, a dev release of a
        final before its pre-releases, a post after its release, a local after its public."""
        if self.pre is None and self.post is None and self.dev is not None:
            pre: tuple[int, ...] = (-1,)
        elif self.pre is None:
            pre = (3,)
        else:
            pre = (_PHASE[self.pre[0]], self.pre[1])
        post = (-1,) if self.post is None else (self.post,)
        dev = (1,) if self.dev is None else (0, self.dev)
        local = () if self.local is None else _local_key(self.local)
        return self.epoch, _trimmed(self.release), pre, post, dev, local


def _trimmed(release: tuple[int, ...]) -> tuple[int, ...]:
    end = len(release)
    while end > 1 and release[end - 1] == 0:
        end -= 1
    return release[:end]


def _local_key(local: str) -> tuple[object, ...]:
    # Numeric parts sort after (and among themselves apart from) alphanumeric ones.
    return tuple(
        (1, int(part), "") if part.isdigit() else (0, 0, part)
        for part in re.split(r"[-_.]", local.lower())
    )


def parse(text: str) -> Version:
    match = _VERSION.match(text)
    if match is None:
        raise InvalidVersion(f"not a PEP 440 version: {text!r}")
    group = match.group
    pre = None
    if group("pre_l"):
        pre = (_PRE[group("pre_l").lower()], int(group("pre_n") or 0))
    post = None
    if group("post_n1") is not None:
        post = int(group("post_n1"))
    elif group("post_l"):
        post = int(group("post_n2") or 0)
    dev = int(group("dev_n") or 0) if group("dev_l") else None
    return Version(
        epoch=int(group("epoch") or 0),
        release=tuple(int(part) for part in group("release").split(".")),
        pre=pre,
        post=post,
        dev=dev,
        local=group("local").lower() if group("local") else None,
    )


def _prefix_match(candidate: Version, spec: str) -> bool:
    """``==1.2.*``: the candidate's public release starts with 1.2 (zero-padded)."""
    wanted = parse(spec[:-2])
    if candidate.epoch != wanted.epoch:
        return False
    size = len(wanted.release)
    release = (candidate.release + (0,) * size)[:size]
    return release == wanted.release


def _clause_holds(candidate: Version, text: str, op: str, spec: str) -> bool:
    if op == "===":
        # Arbitrary equality: the same text (a leading "v" aside).
        return text.strip().lower().removeprefix("v") == spec.lower().removeprefix("v")
    if spec.endswith(".*"):
        if op not in ("==", "!="):
            raise InvalidVersion(f"{op}{spec}: a wildcard goes with == or != only")
        found = _prefix_match(candidate, spec)
        return found if op == "==" else not found
    wanted = parse(spec)
    mine = candidate if wanted.local is not None else candidate.public
    if op == "==":
        return mine.key() == wanted.key()
    if op == "!=":
        return mine.key() != wanted.key()
    public = candidate.public
    if op == "<=":
        return public.key() <= wanted.key()
    if op == ">=":
        return public.key() >= wanted.key()
    same_base = candidate.base == wanted.base
    if op == "<":
        # <V excludes V's own pre-releases unless V is one.
        if candidate.key() >= wanted.key():
            return False
        return not (not wanted.is_prerelease and candidate.is_prerelease and same_base)
    if op == ">":
        # >V excludes V's post-releases unless V is one, and V's local versions.
        if candidate.key() <= wanted.key():
            return False
        unposted = (candidate.epoch, _trimmed(candidate.release), candidate.pre)
        posted = wanted.post is None and candidate.post is not None
        if posted and unposted == (wanted.epoch, _trimmed(wanted.release), wanted.pre):
            return False
        return not (candidate.local is not None and public.key() == wanted.key())
    if op == "~=":
        if len(wanted.release) < 2:
            raise InvalidVersion(f"~={spec}: a compatible release needs two parts at least")
        prefix = ".".join(str(part) for part in wanted.release[:-1]) + ".*"
        if wanted.epoch:
            prefix = f"{wanted.epoch}!{prefix}"
        return public.key() >= wanted.key() and _prefix_match(candidate, prefix)
    raise InvalidVersion(f"unknown operator {op!r}")


def satisfies(version: str, specifier: str) -> bool:
    """Whether ``version`` meets every comma-separated clause of ``specifier`` (empty: yes).
    Raises InvalidVersion when either cannot be read."""
    candidate = parse(version)
    for clause in specifier.split(","):
        if not clause.strip():
            continue
        match = _CLAUSE.match(clause)
        if match is None:
            raise InvalidVersion(f"not a version specifier: {clause.strip()!r}")
        if not _clause_holds(candidate, version, match.group(1), match.group(2)):
            return False
    return True
