"""Manifests this node validated before: their plans, kept in the layer cache's ``plans/``.

A warm start must not import pydantic (more than half of a warm start's time), yet a manifest
is only run after :class:`j2c_server.wire.manifest.Manifest` accepted it. So the first job on a node
validates, then stores what it accepted (``model_dump``) under the sha256 of the manifest's
bytes *and of the validator* (this j2c's version and the source of the two modules that define
the manifest): the same bytes, checked by the same code, pass again. A later job that fetched
the same bytes builds its :class:`ManifestPlan` from that file, once the file proved to be the
plan of those bytes: it names their digest, and its content is the manifest's JSON field for
field (layer digests, entry, env...), so the cache can only vouch that the validator accepted
them, never change what runs. Any doubt (a file that is someone else's, writable by others, not
a complete plan, of another digest or content) is a miss, and the manifest is validated as on a
cold start.

A presigned manifest (``storage.presign_for_jobs``) is written per job: the same layers, each
with a ``url`` signed for that job, so its bytes never repeat. Its plan is kept under the
digest of the manifest *without* those urls (:func:`without_urls`): what the validator
accepted for every other field, with this job's urls put back, each checked as the model
checks it (a string; ``test_plan.py`` fails if the model ever checks more).

Plans are a few kB each; the least recently used beyond :data:`MAX_PLANS` are removed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import json
import os
import stat
from pathlib import Path
from typing import Any

from j2c_server.core.manifest_plan import ManifestPlan, PlanError
from j2c_server.core.version import __version__
from j2c_server.unpack.cache.files import unsafe, write_json
from j2c_server.unpack.log import warn

MAX_PLANS = 256
_OPEN_FLAGS = os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
# The modules whose checks accepted a plan: found by module name, so a move or split of either
# is followed (or fails loudly here) instead of silently hashing a file that is not there.
VALIDATOR_MODULES = ("j2c_server.wire.manifest", "j2c_server.core.manifest_plan")


def validator_id() -> str:
    """What accepted a plan: this j2c's version and its manifest models' source bytes (a new
    image with other checks never reads an older one's plans)."""
    digest = hashlib.sha256(__version__.encode())
    for name in VALIDATOR_MODULES:
        # find_spec locates the file without importing it (pydantic stays unloaded).
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise RuntimeError(f"j2c-unpack: the manifest validator {name} is not installed")
        digest.update(Path(spec.origin).read_bytes())
    return digest.hexdigest()[:16]


class PlanCache:
    def __init__(self, folder: Path, owners: frozenset[int]) -> None:
        self.folder = folder
        self.owners = owners
        self._validator = validator_id()

    def _path(self, manifest_sha256: str) -> Path:
        return self.folder / f"{manifest_sha256}-{self._validator}.json"

    def get(self, manifest_sha256: str, raw: object) -> ManifestPlan | None:
        """The plan of the manifest whose bytes hash to ``manifest_sha256`` and parse to
        ``raw``, if this validator accepted them on this node before; None otherwise."""
        path = self._path(manifest_sha256)
        try:
            fd = os.open(path, os.O_RDONLY | _OPEN_FLAGS)
        except OSError:
            return None  # not there (or a symlink): validate
        with os.fdopen(fd, "rb") as handle:
            st = os.fstat(handle.fileno())
            why = unsafe(st, self.owners, folder=False)
            if why or not stat.S_ISREG(st.st_mode):
                warn("cache", f"plan {path.name} refused: it {why or 'is not a file'}")
                return None
            plan: ManifestPlan | None = None
            try:
                kept = json.loads(handle.read())
                why = _not_of(kept, manifest_sha256, raw)
                plan = None if why else ManifestPlan.from_dict(kept["manifest"])
            except (ValueError, KeyError, TypeError, PlanError) as exc:
                why = str(exc)
            if plan is None:
                warn("cache", f"plan {path.name} refused ({why}): the manifest is validated again")
                return None
        with contextlib.suppress(OSError):
            os.utime(path)  # least recently used = oldest mtime
        return plan

    def put(self, manifest_sha256: str, raw: object, dumped: dict[str, object]) -> None:
        """Keep what the validator accepted; a cache that cannot take it only costs speed.
        A manifest not written as j2c writes it (defaults left out, say) is not kept: its
        plan could not be checked against its bytes, so it is validated on every start."""
        if not written_out(dumped, raw):
            warn("cache", "the manifest's plan is not kept: not in j2c's canonical form")
            return
        record: dict[str, object] = {"manifest_sha256": manifest_sha256, "manifest": dumped}
        try:
            write_json(self._path(manifest_sha256), record)
            self._trim()
        except OSError as exc:
            warn("cache", f"the manifest's plan is not kept: {exc.strerror or exc}")

    def _trim(self) -> None:
        plans = sorted(self.folder.glob("*.json"), key=lambda p: p.stat().st_mtime)
        for old in plans[: max(0, len(plans) - MAX_PLANS)]:
            with contextlib.suppress(OSError):
                old.unlink()


def _not_of(kept: object, manifest_sha256: str, raw: object) -> str | None:
    """Why a kept plan is not the plan of these manifest bytes (None: it is)."""
    if not isinstance(kept, dict) or kept.get("manifest_sha256") is None:
        return "it names no manifest digest"  # written by an older j2c-unpack
    if kept["manifest_sha256"] != manifest_sha256:
        return "it is the plan of another manifest digest"
    if not written_out(kept.get("manifest"), raw):
        return "its layers, entry or env are not the fetched manifest's"
    return None


def written_out(dumped: object, raw: object) -> bool:
    """Whether ``raw`` (the manifest's JSON) is ``dumped`` (a full plan) as j2c writes a
    manifest: every field, ``None`` left out (``Manifest.canonical_json``). Then a plan says
    nothing the manifest's bytes do not: a plan with other layer digests, another entry or env
    is never used for them."""
    if isinstance(dumped, dict):
        present = {key: value for key, value in dumped.items() if value is not None}
        return (
            isinstance(raw, dict)
            and present.keys() == raw.keys()
            and all(written_out(value, raw[key]) for key, value in present.items())
        )
    if isinstance(dumped, list):
        return (
            isinstance(raw, list) and len(dumped) == len(raw) and all(map(written_out, dumped, raw))
        )
    return type(dumped) is type(raw) and dumped == raw


@dataclasses.dataclass(frozen=True)
class Urls:
    """The ``url`` of each layer and big file of a manifest (None where it has none)."""

    layers: tuple[str | None, ...]
    files: tuple[str | None, ...]

    def restored(self, plan: ManifestPlan) -> ManifestPlan:
        """``plan`` (of the manifest without its urls) with these urls put back."""
        layers = [
            dataclasses.replace(lay, url=url)
            for lay, url in zip(plan.layers, self.layers, strict=True)
        ]
        files = plan.files
        if files is not None:
            files = [
                dataclasses.replace(blob, url=url)
                for blob, url in zip(files, self.files, strict=True)
            ]
        return dataclasses.replace(plan, layers=layers, files=files)


def dump_without_urls(dumped: dict[str, Any]) -> dict[str, Any]:
    """A validated dump with no url: what the validator accepted of the url-free manifest."""
    files = dumped.get("files")
    return {
        **dumped,
        "layers": [{**layer, "url": None} for layer in dumped["layers"]],
        "files": None if files is None else [{**blob, "url": None} for blob in files],
    }


def without_urls(raw: object) -> tuple[str, object, Urls] | None:
    """A manifest's JSON that names urls: the sha256 of its canonical JSON without them, that
    JSON, and the urls. None when it names none (its plan is kept under its own digest) or when
    one is not a string or the layers and files are not lists of objects (validated as is)."""
    if not isinstance(raw, dict):
        return None
    layers, files = raw.get("layers"), raw.get("files") or []
    if not isinstance(layers, list) or not isinstance(files, list):
        return None
    items = [*layers, *files]
    if not all(isinstance(item, dict) for item in items):
        return None
    if not any("url" in item for item in items):
        return None
    if any("url" in item and not isinstance(item["url"], str) for item in items):
        return None  # the validator says why

    def bare_items(listed: list[dict[str, object]]) -> list[dict[str, object]]:
        return [{key: value for key, value in item.items() if key != "url"} for item in listed]

    bare = {**raw, "layers": bare_items(layers), **({"files": bare_items(files)} if files else {})}
    canonical = json.dumps(bare, sort_keys=True, separators=(",", ":")).encode()
    urls = Urls(tuple(item.get("url") for item in layers), tuple(item.get("url") for item in files))
    return "bare" + hashlib.sha256(canonical).hexdigest(), bare, urls
