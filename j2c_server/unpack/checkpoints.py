"""A job's checkpoint folders: which of their files are complete, which checkpoints are kept in
the store, and which are dropped (the checkpoint lane of :mod:`.outputs`).

A checkpoint folder (``--checkpoint-dir``, relative to the working directory; ``checkpoints/``
by default from the server) holds **entries**: each file or folder directly in it is one
checkpoint (``checkpoints/step_12.pt``, a Hugging Face ``checkpoints/checkpoint-500/``). An
entry was saved when its newest file was written.

- **Complete files only.** A file counts as written once its size, mtime and inode were the
  same at two looks, or it was last written over a second ago (``SETTLE_S``), and at the
  job's end; an entry counts once every file of it does. An entry still being written is left
  as the store has it (its earlier version stays listed). Writing a checkpoint to a temporary
  name and renaming it into place (``torch.save(state, tmp); os.replace(tmp, path)``) means no
  half file is ever seen at all.
- **Bounded.** Of each folder, the newest ``keep_last`` complete entries are kept in the store
  (entries a resumed attempt carried over from the last one count as well); older ones are
  dropped from the store, never from the job's disk. Then, newest first, entries past the
  ``max_bytes`` cap are left out, with the reason.

Standard library only: j2c-unpack imports it when the server asked for checkpoint folders.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from j2c_server.core.units import byte_size
from j2c_server.unpack.written import Written, every_file

SETTLE_S = 1.0
POLL_S = 1.0  # how often the folders' stats are looked at, for changes


@dataclass(frozen=True)
class CheckpointRules:
    """Where checkpoints are (folders relative to the code folder, as outputs are named) and
    how many of them the store keeps."""

    folders: tuple[str, ...]
    every_s: float
    keep_last: int
    max_bytes: int

    def owns(self, name: str) -> bool:
        """Whether the output ``name`` (relative to the code folder) is a checkpoint file."""
        return any(name.startswith(f"{folder}/") for folder in self.folders)


@dataclass(frozen=True)
class CarriedEntry:
    """A checkpoint the last attempt left in the store and this one did not restore."""

    name: str
    folder: str
    saved_at: float
    files: tuple[tuple[str, int, str], ...]  # (name, size, sha256) of each of its files

    @property
    def size(self) -> int:
        return sum(size for _, size, _ in self.files)


@dataclass
class Entry:
    """One checkpoint in the job's working copy."""

    name: str
    folder: str
    files: list[Written] = field(default_factory=list)
    complete: bool = True

    @property
    def saved_at(self) -> float:
        return max((item.stat.st_mtime for item in self.files), default=0.0)

    @property
    def size(self) -> int:
        return sum(item.stat.st_size for item in self.files)


@dataclass
class Choice:
    """What a round keeps, drops and leaves out."""

    kept: list[Entry]  # local, complete: uploaded and listed
    carried: list[CarriedEntry]  # kept from the last attempt, in the store already
    held: list[Entry]  # being written: what the store has of them stays
    dropped: list[str]  # entries dropped from the store (older than keep_last)
    left_out: list[dict[str, object]]  # past the cap: name, size, reason


def scan(
    code: Path,
    rules: CheckpointRules,
    seen: dict[str, tuple[int, int, int]],
    *,
    final: bool,
    now: float | None = None,
) -> list[Entry]:
    """The entries of every checkpoint folder under ``code``, each marked complete or not
    (``seen``: every file's stat key at the previous look, updated here)."""
    now = time.time() if now is None else now
    entries: dict[str, Entry] = {}
    looked: dict[str, tuple[int, int, int]] = {}
    for folder in rules.folders:
        for item in every_file(code / folder):
            name = f"{folder}/{item.name}"
            top = f"{folder}/{item.name.split('/', 1)[0]}"
            entry = entries.setdefault(top, Entry(top, folder))
            entry.files.append(Written(name, item.path, item.stat))
            looked[name] = item.key
            settled = seen.get(name) == item.key or now - item.stat.st_mtime >= SETTLE_S
            if not (final or settled):
                entry.complete = False
    seen.clear()
    seen.update(looked)
    return list(entries.values())


def fingerprint(entries: list[Entry]) -> frozenset[tuple[str, tuple[int, int, int]]]:
    """What changing any checkpoint file changes."""
    return frozenset((item.name, item.key) for entry in entries for item in entry.files)


def choose(entries: list[Entry], carried: list[CarriedEntry], rules: CheckpointRules) -> Choice:
    """The newest ``keep_last`` complete entries of each folder (local or carried), then the
    byte cap over them, newest first."""
    local = {entry.name: entry for entry in entries}
    held = [entry for entry in entries if not entry.complete]
    candidates: list[Entry | CarriedEntry] = [entry for entry in entries if entry.complete]
    candidates += [entry for entry in carried if entry.name not in local]
    # Newest first; of two saved at once, the later name (step_0007 after step_0006).
    newest_first = sorted(candidates, key=lambda entry: (entry.saved_at, entry.name), reverse=True)
    kept: list[Entry | CarriedEntry] = []
    dropped: list[str] = []
    per_folder: dict[str, int] = {}
    for entry in newest_first:
        taken = per_folder.get(entry.folder, 0)
        if taken >= rules.keep_last:
            dropped.append(entry.name)
            continue
        per_folder[entry.folder] = taken + 1
        kept.append(entry)
    left_out: list[dict[str, object]] = []
    total = sum(entry.size for entry in held)  # what the store holds of them stays
    fitting: list[Entry | CarriedEntry] = []
    for entry in kept:
        if total + entry.size > rules.max_bytes:
            left_out.append(
                {
                    "name": entry.name,
                    "size": entry.size,
                    "reason": f"{byte_size(entry.size)} over resume.max_mb "
                    f"({byte_size(rules.max_bytes)} for the job's checkpoints, "
                    f"{byte_size(total)} taken by newer ones)",
                }
            )
            continue
        total += entry.size
        fitting.append(entry)
    return Choice(
        kept=[entry for entry in fitting if isinstance(entry, Entry)],
        carried=[entry for entry in fitting if isinstance(entry, CarriedEntry)],
        held=held,
        dropped=dropped,
        left_out=left_out,
    )
