"""Split the code layer's small files into parts: each part is its own content-addressed layer,
so an edit re-packs and uploads only the part that holds the edited file.

Boundaries are content-defined, in the layer's walk order: a part ends after a file (or
symlink) whose path hash falls under ``weight / target``, where the weight is the entry's size
rounded up to a power of two (so the expected part holds about ``target`` bytes whatever the
files' sizes), or once it holds :data:`CAP_FACTOR` x ``target`` bytes. A decision depends on the
entry's own path and size bucket only, so

- an edit changes exactly one part (unless the file's size crosses a power of two and its hash
  falls in between, or the edit pushes a part over the cap: rare, and then one neighbour too);
- adding or removing a file changes its part and at most one neighbour (a new boundary splits
  the part in two, a removed one merges two).

Each part also holds the folder entries its files need (their parents, with their modes), so
it extracts on its own; a folder may be in several parts. Empty folders stay where the walk
put them. Folders of a layer in parts carry mtime 0: a folder's mtime changes with every file
added, removed or saved by a rename in it, which would change every part holding the folder.

A layer whose small files add up to at most ``target`` is one part: the layer as before, with
the same fingerprint and digest (and folder mtimes).
"""

from __future__ import annotations

import dataclasses
import hashlib

from j2c_server.pack.scan import DIR, FILE, Entry, ScannedLayer

CAP_FACTOR = 4  # a part never grows past this many times the target
HEADER = 512  # a tar header: what an entry costs besides its bytes


def _weight(entry: Entry) -> int:
    """The entry's bytes in the archive, rounded up to a power of two."""
    size = (entry.size if entry.kind == FILE else 0) + HEADER
    return 1 << (size - 1).bit_length()


def _ends_part(entry: Entry, target: int) -> bool:
    """Whether a part ends after ``entry``: its path hash, a uniform 64-bit number, is under
    ``2**64 * weight / target``."""
    drawn = int.from_bytes(hashlib.sha256(entry.rel.encode()).digest()[:8], "big")
    return drawn * target < _weight(entry) << 64


def split_entries(entries: list[Entry], target: int) -> list[list[Entry]]:
    """``entries`` (a walk, in order) cut into parts; each part in walk order with the folders
    its entries need. One part when ``target`` is 0 or everything fits in it."""
    if target <= 0 or sum(e.size for e in entries if e.kind == FILE) <= target:
        return [entries]
    groups: list[list[int]] = [[]]
    held = 0
    for index, entry in enumerate(entries):
        groups[-1].append(index)
        if entry.kind == DIR:
            continue
        held += (entry.size if entry.kind == FILE else 0) + HEADER
        if _ends_part(entry, target) or held >= CAP_FACTOR * target:
            groups.append([])
            held = 0
    if all(entries[i].kind == DIR for i in groups[-1]):  # trailing empty folders: the last part
        tail = groups.pop()
        if groups:
            groups[-1] += tail
    if len(groups) <= 1:
        return [entries]
    # A folder's mtime moves whenever a file in it is added, removed or saved by a rename (as
    # JupyterLab saves): in parts, folders carry none, or every part holding it would change.
    entries = [dataclasses.replace(e, mtime_ns=0) if e.kind == DIR else e for e in entries]
    folders = {e.rel: i for i, e in enumerate(entries) if e.kind == DIR}
    parts: list[list[Entry]] = []
    for group in groups:
        wanted = set(group)
        seen: set[str] = set()
        for index in group:
            rel = entries[index].rel
            while "/" in rel:
                rel = rel.rpartition("/")[0]
                if rel in seen:
                    break  # it and its parents are in already
                seen.add(rel)
                if (parent := folders.get(rel)) is not None:
                    wanted.add(parent)
        parts.append([entries[i] for i in sorted(wanted)])
    return parts


def split_layer(layer: ScannedLayer, target: int) -> list[ScannedLayer]:
    """The layer's parts as layers of their own (the same root and role)."""
    parts = split_entries(layer.entries, target)
    if len(parts) == 1:
        return [layer]
    return [dataclasses.replace(layer, entries=part) for part in parts]
