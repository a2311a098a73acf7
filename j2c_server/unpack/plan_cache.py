"""Manifests this node validated before: their plans, kept in the layer cache's ``plans/``.

A warm start must not import pydantic (more than half of a warm start's time), yet a manifest
is only run after :class:`j2c_server.models.Manifest` accepted it. So the first job on a node
validates, then stores what it accepted (``model_dump``) under the sha256 of the manifest's
bytes *and of the validator* (this j2c's version and the source of the two modules that define
the manifest): the same bytes, checked by the same code, pass again. A later job that fetched
the same bytes builds its :class:`ManifestPlan` from that file; any doubt (a file that is
someone else's, writable by others, not a complete plan) is a miss, and the manifest is
validated as on a cold start.

Plans are a few kB each; the least recently used beyond :data:`MAX_PLANS` are removed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from pathlib import Path

from .. import __version__
from ..manifest_plan import ManifestPlan, PlanError
from .cache_files import unsafe, write_json
from .log import say

MAX_PLANS = 256
_OPEN_FLAGS = os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_VALIDATOR_SOURCES = ("models.py", "manifest_plan.py")


def validator_id() -> str:
    """What accepted a plan: this j2c's version and its manifest models' source bytes (a new
    image with other checks never reads an older one's plans)."""
    digest = hashlib.sha256(__version__.encode())
    package = Path(__file__).resolve().parent.parent
    for name in _VALIDATOR_SOURCES:
        with contextlib.suppress(OSError):  # installed without sources: the version alone
            digest.update((package / name).read_bytes())
    return digest.hexdigest()[:16]


class PlanCache:
    def __init__(self, folder: Path, owners: frozenset[int]) -> None:
        self.folder = folder
        self.owners = owners
        self._validator = validator_id()

    def _path(self, manifest_sha256: str) -> Path:
        return self.folder / f"{manifest_sha256}-{self._validator}.json"

    def get(self, manifest_sha256: str) -> ManifestPlan | None:
        """The plan of the manifest whose bytes hash to ``manifest_sha256``, if this validator
        accepted them on this node before; None otherwise."""
        path = self._path(manifest_sha256)
        try:
            fd = os.open(path, os.O_RDONLY | _OPEN_FLAGS)
        except OSError:
            return None  # not there (or a symlink): validate
        with os.fdopen(fd, "rb") as handle:
            st = os.fstat(handle.fileno())
            why = unsafe(st, self.owners, folder=False)
            if why or not stat.S_ISREG(st.st_mode):
                say("cache", f"plan {path.name} refused: it {why or 'is not a file'}")
                return None
            try:
                plan = ManifestPlan.from_dict(json.loads(handle.read())["manifest"])
            except (ValueError, KeyError, TypeError, PlanError) as exc:
                say("cache", f"plan {path.name} refused ({exc}): the manifest is validated again")
                return None
        with contextlib.suppress(OSError):
            os.utime(path)  # least recently used = oldest mtime
        return plan

    def put(self, manifest_sha256: str, dumped: dict[str, object]) -> None:
        """Keep what the validator accepted; a cache that cannot take it only costs speed."""
        try:
            write_json(self._path(manifest_sha256), {"manifest": dumped})
            self._trim()
        except OSError as exc:
            say("cache", f"the manifest's plan is not kept: {exc.strerror or exc}")

    def _trim(self) -> None:
        plans = sorted(self.folder.glob("*.json"), key=lambda p: p.stat().st_mtime)
        for old in plans[: max(0, len(plans) - MAX_PLANS)]:
            with contextlib.suppress(OSError):
                old.unlink()
