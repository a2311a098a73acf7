"""The job's outputs, uploaded to a store prefix: ``$J2C_OUTPUT_DIR`` and what the job created
or changed in its working copy of the project (written.py), with an index next to them.

- **What**: every regular file under the output dir keeps its relative name; every file the job
  wrote under its code folder keeps its name relative to that folder (``models/a.bin``). A
  working-copy file named like an output-dir file, or like the index, is left out. Symbolic
  links are never followed. Secrets (the packer's name and content rules) are left out.
- **Caps**: per file (``--outputs-max-file-mb``) and in total (``--outputs-max-total-mb``).
  Files are taken smallest first, so the total cap leaves out the largest; what is left out,
  and why, is in the index (largest first): ``ckpt/e9.pt`` "3.2 GB over outputs.max_file_mb".
- **When**: after the run, whatever its exit code (a failed run's partial outputs are what one
  needs to debug it); while it runs, every ``--outputs-sync-minutes`` from a background thread,
  and at once when SIGTERM/SIGINT is forwarded to the job (:meth:`OutputsSync.wake`). Each sync
  uploads only files that are new or changed since the last one (by size, mtime and inode), and
  removes from the store what the job deleted or what is now left out, so the store holds what
  the index lists. A file that changes while it is uploaded is not listed (the next sync has it).
- **The index**: ``<output URI>/.j2c-outputs.json`` (:data:`INDEX_NAME`), written last by every
  sync: each file's name, size and sha256, the files that failed and why, the ones left out and
  why, and whether it is the final sync. Its own sha256 is printed in the job's log
  (``j2c: outputs: index sha256:<hex>``): the log reaches the server through the scheduler, a
  channel nobody else with write access to the store can change, so the results stage checks
  the stored index against it (jobs/results.py) and every artifact against the index.

- **Checkpoints** (``--checkpoint-dir``, :mod:`.checkpoints`): the files under the job's
  checkpoint folders are a lane of their own, not part of the working copy's scan: looked at
  every second, uploaded when they changed (at most every ``--checkpoints-every-s``; at once on
  SIGTERM, and at the end), complete files only, the newest ``--checkpoints-keep`` entries of a
  folder kept in the store and older ones dropped from it (said in the log). The index lists
  them in ``checkpoints`` (entry, folder, saved_at, files), newest first: what a resumed
  attempt restores (restore.py). Such an attempt carries the last attempt's index over
  (:meth:`OutputsSync.carry`): restored files are not uploaded again, and what it did not
  restore stays listed until the job replaces or drops it.

- **Every rank** of a multi-node job uploads its own outputs: rank 0 to the output URI itself,
  rank ``k`` to ``<output URI>/rank-<k>/`` (:func:`rank_uri`) with an index of its own there,
  whose sha256 it prints as ``j2c: outputs: index of rank <k> sha256:<hex>``
  (:func:`digest_mark`). Rank 0 leaves out a file of its own named ``rank-<k>/...`` for a rank
  ``k`` of the job, so no rank's files land on another's. The results stage merges the indexes
  (jobs/results.py).

The storage package is imported only when something is uploaded, so a job without
``--output-uri`` never loads it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from j2c_server.core.errors import J2CError
from j2c_server.core.units import byte_size, count
from j2c_server.unpack.checkpoints import (
    POLL_S,
    SETTLE_S,
    CarriedEntry,
    CheckpointRules,
    Choice,
    Entry,
    choose,
    fingerprint,
    scan,
)
from j2c_server.unpack.errors import OutputsNotUploaded
from j2c_server.unpack.fetch import shown
from j2c_server.unpack.log import Stage, say, warn
from j2c_server.unpack.written import (
    Snapshot,
    Written,
    every_file,
    secret_reason,
    stat_key,
    written_files,
)

if TYPE_CHECKING:
    from j2c_server.storage.base import ObjectStore
    from j2c_server.storage.post_upload import PostPolicyStore

CONCURRENT_UPLOADS = 4
INDEX_NAME = ".j2c-outputs.json"
INDEX_FORMAT = 2
INDEX_DIGEST_MARK = "index sha256:"
# Rank k's mark; it does not contain INDEX_DIGEST_MARK, so a search for rank 0's never finds it.
RANK_DIGEST_MARK = "index of rank {rank} sha256:"
RANK_FOLDER = "rank-{rank}"
MB = 1_000_000
_HASH_CHUNK = 1 << 20


def rank_folder(rank: int) -> str:
    """The folder under the job's outputs where rank ``rank`` (> 0) uploads its own."""
    return RANK_FOLDER.format(rank=rank)


def rank_uri(output_uri: str, rank: int) -> str:
    """Where rank ``rank`` uploads: the output URI itself for rank 0, its folder for others."""
    return output_uri if rank == 0 else f"{output_uri.rstrip('/')}/{rank_folder(rank)}"


def digest_mark(rank: int) -> str:
    """What precedes the index's sha256 in the log line of rank ``rank``."""
    return INDEX_DIGEST_MARK if rank == 0 else RANK_DIGEST_MARK.format(rank=rank)


@dataclass(frozen=True)
class Caps:
    """The caps in MB (10^6 bytes); j2c-unpack's command line has their defaults."""

    max_file_mb: float
    max_total_mb: float


@dataclass(frozen=True)
class WorkingCopy:
    """The job's code folder and what it held before the entry point started."""

    code: Path
    snapshot: Snapshot
    skip: tuple[Path, ...] = ()


@dataclass
class _Synced:
    key: tuple[int, int, int]
    size: int
    sha256: str


@dataclass
class _Round:
    chosen: list[Written]
    left_out: list[dict[str, Any]]
    failed: list[dict[str, str]] = field(default_factory=list)
    uploaded: int = 0
    uploaded_bytes: int = 0
    owns: Callable[[str], bool] = lambda _name: True  # names this round may delete
    checkpoints: Choice | None = None


def select(
    outputs: list[Written],
    written: list[Written],
    caps: Caps,
    judge: Callable[[Written], str | None] = secret_reason,
    reserved: tuple[str, ...] = (),
) -> tuple[list[Written], list[dict[str, Any]]]:
    """What is uploaded, and what is left out with the reason (largest first). ``judge``: why
    a file is a secret, or None; ``reserved``: top folders other ranks upload to."""
    left_out: list[dict[str, Any]] = []

    def leave(item: Written, reason: str) -> None:
        left_out.append({"name": item.name, "size": item.stat.st_size, "reason": reason})

    taken = {item.name for item in outputs}
    pool: list[Written] = []
    for item in outputs:
        reason = judge(item)
        if item.name.split("/", 1)[0] in reserved:
            leave(item, "is in another rank's outputs folder")
        elif reason is not None:
            leave(item, f"is {reason}")
        else:
            pool.append(item)
    for item in written:
        if item.name.split("/", 1)[0] in reserved:
            leave(item, "is in another rank's outputs folder")
        elif item.name in taken:
            leave(item, "has the name of a file in $J2C_OUTPUT_DIR")
        elif item.name == INDEX_NAME:
            leave(item, "has the outputs index's name")
        elif (reason := judge(item)) is not None:
            leave(item, f"is {reason}")
        else:
            pool.append(item)
    chosen: list[Written] = []
    total = 0
    max_file, max_total = caps.max_file_mb * MB, caps.max_total_mb * MB
    for item in sorted(pool, key=lambda one: (one.stat.st_size, one.name)):
        size = item.stat.st_size
        if size > max_file:
            leave(item, f"{byte_size(size)} over outputs.max_file_mb ({caps.max_file_mb:g} MB)")
        elif total + size > max_total:
            leave(
                item,
                f"{byte_size(size)} over outputs.max_total_mb ({caps.max_total_mb:g} MB, "
                f"{byte_size(total)} taken by smaller outputs)",
            )
        else:
            chosen.append(item)
            total += size
    left_out.sort(key=lambda one: (-int(one["size"]), str(one["name"])))
    return chosen, left_out


class OutputsSync:
    """The job's outputs and what is already in the store; syncs are serialised by a lock."""

    def __init__(
        self,
        output_dir: Path,
        output_uri: str,
        caps: Caps,
        working_copy: WorkingCopy | None = None,
        *,
        rank: int = 0,
        nodes: int = 1,
        checkpoints: CheckpointRules | None = None,
    ) -> None:
        """``rank`` of a job on ``nodes`` nodes: rank k > 0 uploads to ``rank-<k>/``;
        ``checkpoints``: the job's checkpoint folders (relative to the code folder of
        ``working_copy``), synced as their own lane."""
        self.output_dir = output_dir
        self.checkpoints = checkpoints if working_copy is not None else None
        # A resumed attempt's inheritance (carry): outputs and checkpoints of the last attempt
        # still in the store, listed until replaced or dropped.
        self._carried_files: dict[str, _Synced] = {}
        self._carried_entries: list[CarriedEntry] = []
        self._seen: dict[str, tuple[int, int, int]] = {}  # checkpoint files at the last look
        self._synced_checkpoints: frozenset[tuple[str, tuple[int, int, int]]] | None = None
        self._left: dict[str, list[dict[str, Any]]] = {"outputs": [], "checkpoints": []}
        self.output_uri = rank_uri(output_uri, rank)
        self.rank = rank
        self._reserved = tuple(rank_folder(k) for k in range(1, nodes)) if rank == 0 else ()
        self.caps = caps
        self.working_copy = working_copy
        self._synced: dict[str, _Synced] = {}
        # Secret verdicts by path and stat: an unchanged file is not read again at each sync.
        self._verdicts: dict[tuple[str, tuple[int, int, int]], str | None] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ while the job runs

    def start(self, every_minutes: float) -> None:
        """Sync every ``every_minutes`` (and when woken) until :meth:`stop`; 0: only when woken."""
        self._thread = threading.Thread(
            target=self._loop, args=(every_minutes * 60 or None,), name="j2c-outputs", daemon=True
        )
        self._thread.start()

    def wake(self) -> None:
        """Sync now (a signal handler calls this when the job is being stopped)."""
        self._wake.set()

    def stop(self) -> None:
        """End the background syncs, after the one in progress."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()

    def carry(
        self,
        restored: list[tuple[str, Path, int, str]],
        files: list[tuple[str, int, str]],
        entries: list[CarriedEntry],
    ) -> None:
        """A resumed attempt starts from the last attempt's outputs index: the ``restored``
        files (name, local path, size, sha256) are in the store already, the other ``files``
        (name, size, sha256) stay listed until the job writes its own, and the checkpoint
        ``entries`` it did not restore count towards ``keep_last`` (restore.py)."""
        with self._lock:
            for name, path, size, sha256 in restored:
                self._synced[name] = _Synced(stat_key(path.lstat()), size, sha256)
            checkpoint_files = {name for entry in entries for name, _, _ in entry.files}
            for name, size, sha256 in files:
                if name not in self._synced and name not in checkpoint_files:
                    self._carried_files[name] = _Synced((0, 0, 0), size, sha256)
            self._carried_entries = list(entries)

    def _loop(self, every_s: float | None) -> None:
        """Full syncs every ``every_s`` and when woken; between them, the checkpoint folders
        looked at every second and synced when they changed (at most every ``every_s`` of
        their own)."""
        now = time.monotonic()
        next_full = now + every_s if every_s else math.inf
        rules = self.checkpoints
        next_look = now + POLL_S if rules is not None else math.inf
        last_checkpoints = now
        while True:
            due = min(next_full, next_look)
            woken = self._wake.wait(None if due == math.inf else max(0.0, due - time.monotonic()))
            self._wake.clear()
            if self._stop.is_set():
                return
            now = time.monotonic()
            try:
                if woken or now >= next_full:
                    done = self.sync(final=False)
                    next_full = now + every_s if every_s else math.inf
                    last_checkpoints = now
                    say(
                        "outputs",
                        f"synced while running: {done.uploaded} new or changed files, "
                        f"{byte_size(done.uploaded_bytes)}",
                    )
                elif rules is not None and now >= next_look:
                    next_look = now + POLL_S
                    # An entry left being written is looked at again once it may have settled.
                    wait = rules.every_s if self._synced_checkpoints is not None else 2 * SETTLE_S
                    if now - last_checkpoints >= wait and self._checkpoints_changed():
                        last_checkpoints = now
                        self._say_checkpoints(self.sync(final=False, only_checkpoints=True))
            except Exception as exc:  # the job must go on; the next sync retries
                warn("outputs", f"sync while running failed, retried next time: {exc}")

    def _checkpoints_changed(self) -> bool:
        """Whether the checkpoint folders differ from what the last round uploaded (one
        ``lstat`` per file; a round that left an entry being written counts as changed)."""
        assert self.checkpoints is not None and self.working_copy is not None
        entries = scan(self.working_copy.code, self.checkpoints, dict(self._seen), final=False)
        return fingerprint(entries) != self._synced_checkpoints

    def _say_checkpoints(self, done: _Round) -> None:
        if done.uploaded:
            kept = done.checkpoints.kept if done.checkpoints is not None else []
            newest = max(kept, key=lambda entry: entry.saved_at, default=None)
            what = f"; newest {newest.name}" if newest is not None else ""
            say(
                "checkpoints",
                f"synced {count(done.uploaded, 'file')}, {byte_size(done.uploaded_bytes)}{what}",
            )

    # ------------------------------------------------------------------ one sync

    def upload(self) -> None:
        """The final sync, after the run: raises OutputsNotUploaded when any file failed."""
        stage = Stage("uploading outputs")
        try:
            done = self.sync(final=True)
        except J2CError as exc:
            raise OutputsNotUploaded(
                f"uploading outputs to {shown(self.output_uri)} failed: {exc.message}",
                hint=exc.hint,
            ) from None
        except OSError as exc:
            raise OutputsNotUploaded(
                f"uploading outputs to {shown(self.output_uri)} failed: "
                f"{exc.filename}: {exc.strerror or exc}"
            ) from None
        for item in done.left_out[:10]:
            warn("outputs", f"left out: {item['name']} {item['reason']}")
        if done.failed:
            first = done.failed[0]
            raise OutputsNotUploaded(
                f"{len(done.failed)} of {len(done.chosen)} outputs not uploaded to "
                f"{shown(self.output_uri)}; {first['name']}: {first['error']}"
            )
        stage.done(
            f"{len(done.chosen)} files in the outputs, {done.uploaded} uploaded now "
            f"({byte_size(done.uploaded_bytes)}), {len(done.left_out)} left out"
        )

    def sync(self, *, final: bool, only_checkpoints: bool = False) -> _Round:
        """One round: every output (or, with ``only_checkpoints``, the checkpoint folders
        alone), then the index."""
        with self._lock:
            rules, copy = self.checkpoints, self.working_copy
            done = _Round([], [])
            if not only_checkpoints:
                outputs = [item for item in every_file(self.output_dir) if item.name != INDEX_NAME]
                written: list[Written] = []
                if copy is not None:
                    own = tuple(copy.code / folder for folder in rules.folders) if rules else ()
                    skip = (*copy.skip, self.output_dir, *own)
                    written = written_files(copy.code, copy.snapshot, skip)
                done.chosen, self._left["outputs"] = select(
                    outputs, written, self.caps, self._judge, self._reserved
                )
            elif rules is not None:
                done.owns = rules.owns
            if rules is not None and copy is not None:
                entries = scan(copy.code, rules, self._seen, final=final)
                done.checkpoints = choose(entries, self._carried_entries, rules)
                secret = self._checkpoint_files(done.checkpoints.kept, done.chosen)
                self._left["checkpoints"] = [*done.checkpoints.left_out, *secret]
                # An entry being written: looked at again soon, whether or not it changes.
                held = bool(done.checkpoints.held)
                self._synced_checkpoints = None if held else fingerprint(entries)
            done.left_out = sorted(
                [*self._left["outputs"], *self._left["checkpoints"]],
                key=lambda one: (-int(one["size"]), str(one["name"])),
            )
            asyncio.run(self._sync(done, final=final))
            return done

    def _checkpoint_files(self, kept: list[Entry], chosen: list[Written]) -> list[dict[str, Any]]:
        """The kept entries' files added to ``chosen`` (a secret among them left out: what the
        job writes there is judged as any output)."""
        left_out: list[dict[str, Any]] = []
        for entry in kept:
            for item in entry.files:
                reason = self._judge(item)
                if reason is None:
                    chosen.append(item)
                else:
                    left_out.append(
                        {"name": item.name, "size": item.stat.st_size, "reason": f"is {reason}"}
                    )
        return left_out

    async def _drop_checkpoints(
        self, store: ObjectStore | PostPolicyStore, choice: Choice, gone: list[str]
    ) -> None:
        """Carried entries no longer kept leave the store; the entries this round dropped from
        it (``gone``: the names deleted) are said in one line."""
        kept = {entry.name for entry in choice.carried}
        dropped = {
            name
            for name in choice.dropped
            if any(g.startswith(f"{name}/") or g == name for g in gone)
        }
        for entry in [entry for entry in self._carried_entries if entry.name not in kept]:
            self._carried_entries.remove(entry)
            dropped.add(entry.name)
            for name, _, _ in entry.files:
                await _delete(store, name)
        if dropped and self.checkpoints is not None:
            shown = ", ".join(sorted(dropped)[:5]) + (" ..." if len(dropped) > 5 else "")
            say(
                "checkpoints",
                f"dropped {count(len(dropped), 'older checkpoint')} from the store ({shown}): "
                f"the newest {self.checkpoints.keep_last} of a folder are kept (resume.keep_last)",
            )

    def _checkpoint_index(self, choice: Choice | None) -> list[dict[str, Any]]:
        """The checkpoints the store holds whole, newest first: the kept entries (and those
        being written) whose every file is synced as it is, and the carried ones."""
        if choice is None:
            return []
        listed: list[dict[str, Any]] = []
        for entry in [*choice.kept, *choice.held]:
            synced = [self._synced.get(item.name) for item in entry.files]
            if not entry.files or any(known is None for known in synced):
                continue
            known = [one for one in synced if one is not None]
            listed.append(
                {
                    "entry": entry.name,
                    "folder": entry.folder,
                    "saved_at": max(one.key[1] for one in known) / 1e9,
                    "files": sorted(item.name for item in entry.files),
                    "bytes": sum(one.size for one in known),
                }
            )
        for carried in choice.carried:
            listed.append(
                {
                    "entry": carried.name,
                    "folder": carried.folder,
                    "saved_at": carried.saved_at,
                    "files": sorted(name for name, _, _ in carried.files),
                    "bytes": carried.size,
                }
            )
        listed.sort(key=lambda entry: (float(entry["saved_at"]), str(entry["entry"])), reverse=True)
        return listed

    def _judge(self, item: Written) -> str | None:
        key = (str(item.path), item.key)
        if key not in self._verdicts:
            self._verdicts[key] = secret_reason(item)
        return self._verdicts[key]

    async def _sync(self, done: _Round, *, final: bool) -> None:
        store = _outputs_store(self.output_uri)
        limit = asyncio.Semaphore(CONCURRENT_UPLOADS)

        async def one(item: Written) -> None:
            async with limit:
                try:
                    size, sha256 = await asyncio.to_thread(_size_and_sha256, item.path)
                    await store.put_file(item.name, item.path)
                    after = await asyncio.to_thread(item.path.lstat)
                except (J2CError, OSError) as exc:
                    self._synced.pop(item.name, None)
                    done.failed.append({"name": item.name, "error": _failure(exc)})
                    return
            if stat_key(after) != item.key or size != after.st_size:
                self._synced.pop(item.name, None)  # the store holds bytes of unknown state
                if final:
                    done.failed.append({"name": item.name, "error": "changed while uploaded"})
                return
            self._synced[item.name] = _Synced(item.key, size, sha256)
            done.uploaded += 1
            done.uploaded_bytes += size

        try:
            changed = [
                item
                for item in done.chosen
                if (known := self._synced.get(item.name)) is None or known.key != item.key
            ]
            await asyncio.gather(*(one(item) for item in changed))
            names = {item.name for item in done.chosen}
            choice = done.checkpoints
            held = {item.name for entry in choice.held for item in entry.files} if choice else set()
            gone = [name for name in self._synced if name not in names | held and done.owns(name)]
            for name in gone:
                del self._synced[name]  # deleted by the job, or left out now
                await _delete(store, name)
            if choice is not None:
                await self._drop_checkpoints(store, choice, gone)
            done.failed.sort(key=lambda item: item["name"])
            listed = {**self._carried_files, **self._synced}
            for entry in self._carried_entries:
                listed.update(
                    {name: _Synced((0, 0, 0), size, sha) for name, size, sha in entry.files}
                )
            files = [
                {"name": name, "size": known.size, "sha256": known.sha256}
                for name, known in sorted(listed.items())
            ]
            index = {
                "format": INDEX_FORMAT,
                "final": final,
                "files": files,
                "failed": done.failed,
                "left_out": done.left_out,
                "checkpoints": self._checkpoint_index(choice),
            }
            raw = json.dumps(index, indent=1).encode() + b"\n"
            await store.put_bytes(INDEX_NAME, raw)
            say("outputs", f"{digest_mark(self.rank)}{hashlib.sha256(raw).hexdigest()}")
        finally:
            await store.close()


async def _delete(store: ObjectStore | PostPolicyStore, name: str) -> None:
    try:
        await store.delete(name)
    except (J2CError, OSError) as exc:
        warn("outputs", f"{name} stays in the store, not listed: {_failure(exc)}")


def _outputs_store(output_uri: str) -> ObjectStore | PostPolicyStore:
    """Where the sync writes: through the job's upload policy when the server gave it one (a
    presigned job has no store credentials), else the store at ``output_uri`` itself."""
    from j2c_server.storage.post_upload import ENV_NAME

    policy = os.environ.get(ENV_NAME)
    if policy:
        from j2c_server.storage.post_upload import PostPolicy, PostPolicyStore
        from j2c_server.storage.urls import split_s3_url

        _bucket, base = split_s3_url(output_uri, field="--output-uri")
        return PostPolicyStore(PostPolicy.from_json(policy), base)
    from j2c_server.storage import open_store_from_env

    return open_store_from_env(output_uri)


def _size_and_sha256(path: Path) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as handle:
        while chunk := handle.read(_HASH_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def _failure(exc: BaseException) -> str:
    if isinstance(exc, J2CError):
        return exc.message
    if isinstance(exc, OSError):
        return f"{exc.strerror or exc}"
    return str(exc) or type(exc).__name__
