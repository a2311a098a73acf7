"""What a send would ship, as content fingerprints, and which files changed since an earlier send.

A send is matched to an earlier job by its request *and* its content. The content of a layer is
its stat fingerprint (:func:`.fingerprint.fingerprint`: path, kind, mode, size, mtime of every
entry, no file read), computed from the one scan a send makes. To say *what* changed ("2 files
changed since job X"), the scan's entry list is kept beside the layer cache as a walk file named
by that fingerprint; two walks give the added, removed and changed paths. Folders are not
counted: their mtime moves whenever a file in them does.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from j2c_server.core.file_modes import private_dir
from j2c_server.pack.fingerprint import fingerprint
from j2c_server.pack.models import PackPlan
from j2c_server.pack.plan import Prepared
from j2c_server.pack.scan import DIR, ScannedLayer
from j2c_server.wire.api import FileChange
from j2c_server.wire.manifest import LayerRole

WALKS = "walks"
KEEP_WALKS = 64  # walk files kept; older ones are removed (only messages depend on them)
LISTED_CHANGES = 20


class ScanReport(BaseModel):
    """One scan of a send: its plan, each layer's fingerprint, and what changed since the
    fingerprints it was compared with."""

    model_config = ConfigDict(extra="forbid")

    plan: PackPlan
    content: dict[str, str] = Field(description="Layer role -> stat fingerprint.")
    changed_files: int = 0
    changes: list[FileChange] = Field(default_factory=list)
    compared: bool = Field(False, description="Whether earlier walks were found to compare.")


def walk_of(layer: ScannedLayer) -> dict[str, str]:
    """Path -> the facts its fingerprint hashes, for every entry but folders (made once per
    scan: a kept venv scan hands back the same walk; callers do not change it)."""
    known = layer.memo.get("walk")
    if isinstance(known, dict):
        return known
    walk = {
        e.rel: f"{e.kind}\0{e.mode}\0{e.size}\0{e.mtime_ns}\0{e.link}"
        for e in layer.entries
        if e.kind != DIR
    }
    layer.memo["walk"] = walk
    return walk


def _read_walk(path: Path) -> dict[str, str] | None:
    try:
        text = path.read_bytes().decode()
    except (OSError, UnicodeDecodeError):
        return None
    walk: dict[str, str] = {}
    for line in text.splitlines():
        rel, _, rest = line.partition("\0")
        walk[rel] = rest
    return walk


class Walks:
    """Walk files under ``<cache>/walks/<fingerprint>``, written once each."""

    def __init__(self, cache_dir: Path) -> None:
        self.root = private_dir(Path(cache_dir) / WALKS)

    def save(self, key: str, walk: dict[str, str]) -> None:
        path = self.root / key
        if path.exists():
            os.utime(path)  # recently used: kept by the pruning below
            return
        fd, name = tempfile.mkstemp(prefix=".tmp-", dir=self.root)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write("".join(f"{rel}\0{facts}\n" for rel, facts in walk.items()).encode())
            os.replace(name, path)
        finally:
            Path(name).unlink(missing_ok=True)
        self._prune()

    def load(self, key: str) -> dict[str, str] | None:
        return _read_walk(self.root / key)

    def _prune(self) -> None:
        try:
            files = [entry for entry in os.scandir(self.root) if entry.name[0] != "."]
            if len(files) <= KEEP_WALKS:
                return
            files.sort(key=lambda entry: entry.stat().st_mtime, reverse=True)
            for entry in files[KEEP_WALKS:]:
                Path(entry.path).unlink(missing_ok=True)
        except OSError:
            pass  # pruning is housekeeping; a race with another process is harmless


def diff_walks(role: LayerRole, before: dict[str, str], after: dict[str, str]) -> list[FileChange]:
    changes = [
        FileChange(layer=role, path=rel, change="changed" if rel in before else "added")
        for rel, facts in after.items()
        if before.get(rel) != facts
    ]
    changes += [
        FileChange(layer=role, path=rel, change="removed") for rel in before if rel not in after
    ]
    return sorted(changes, key=lambda change: change.path)


def scan_report(
    prepared: Prepared, cache_dir: Path | str, compare: dict[str, str] | None = None
) -> ScanReport:
    """The scan's fingerprints, its walks saved, and the files changed since ``compare`` (the
    fingerprints of an earlier send, by layer role)."""
    walks = Walks(Path(cache_dir))
    level = prepared.spec.compression_level
    content: dict[str, str] = {}
    changes: list[FileChange] = []
    compared = compare is not None
    for layer in prepared.layers:
        key = fingerprint(layer, level)
        content[layer.role.value] = key
        walk = walk_of(layer)
        walks.save(key, walk)
        if compare is None:
            continue
        earlier_key = compare.get(layer.role.value)
        if earlier_key == key:
            continue
        earlier = walks.load(earlier_key) if earlier_key else {}
        if earlier is None:  # that walk was pruned (or written by an older j2c)
            compared = False
            continue
        changes += diff_walks(layer.role, earlier, walk)
    if compare is not None:
        for role, earlier_key in compare.items():
            if role not in content:  # a layer the earlier send had (a venv no longer shipped)
                earlier = walks.load(earlier_key)
                if earlier is None:
                    compared = False
                    continue
                changes += diff_walks(LayerRole(role), earlier, {})
    return ScanReport(
        plan=prepared.plan,
        content=content,
        changed_files=len(changes),
        changes=changes[:LISTED_CHANGES],
        compared=compared,
    )
