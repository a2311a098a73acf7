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
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from j2c_server.core.errors import J2CError
from j2c_server.core.units import byte_size
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
    ) -> None:
        """``rank`` of a job on ``nodes`` nodes: rank k > 0 uploads to ``rank-<k>/``."""
        self.output_dir = output_dir
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

    def _loop(self, every_s: float | None) -> None:
        while True:
            self._wake.wait(every_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                done = self.sync(final=False)
            except Exception as exc:  # the job must go on; the next sync retries
                warn("outputs", f"sync while running failed, retried next time: {exc}")
                continue
            say(
                "outputs",
                f"synced while running: {done.uploaded} new or changed files, "
                f"{byte_size(done.uploaded_bytes)}",
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

    def sync(self, *, final: bool) -> _Round:
        with self._lock:
            outputs = [item for item in every_file(self.output_dir) if item.name != INDEX_NAME]
            written: list[Written] = []
            if self.working_copy is not None:
                copy = self.working_copy
                skip = (*copy.skip, self.output_dir)
                written = written_files(copy.code, copy.snapshot, skip)
            chosen, left_out = select(outputs, written, self.caps, self._judge, self._reserved)
            done = _Round(chosen, left_out)
            asyncio.run(self._sync(done, final=final))
            return done

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
            for name in [name for name in self._synced if name not in names]:
                del self._synced[name]  # deleted by the job, or left out now
                try:
                    await store.delete(name)
                except (J2CError, OSError) as exc:
                    warn("outputs", f"{name} stays in the store, not listed: {_failure(exc)}")
            done.failed.sort(key=lambda item: item["name"])
            files = [
                {"name": name, "size": known.size, "sha256": known.sha256}
                for name, known in sorted(self._synced.items())
            ]
            index = {
                "format": INDEX_FORMAT,
                "final": final,
                "files": files,
                "failed": done.failed,
                "left_out": done.left_out,
            }
            raw = json.dumps(index, indent=1).encode() + b"\n"
            await store.put_bytes(INDEX_NAME, raw)
            say("outputs", f"{digest_mark(self.rank)}{hashlib.sha256(raw).hexdigest()}")
        finally:
            await store.close()


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
