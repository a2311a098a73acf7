"""A job's blobs downloaded into a blob folder: the layers (``<hex>.tar.zst``) and the big files
(``<hex>.file``), concurrently, each written through ``.part`` while its sha256 is computed and
renamed only once it matches the manifest, so nothing later reads bytes that were not verified.
A blob already there (a restarted job) is verified again and reused.

Both kinds share one loop (:func:`_each`): the first failure, in the given order, is raised once
every download has stopped, and it stops the downloads still running (as does SIGTERM in the
main thread); a download stopped that way is not the error reported. Where a blob comes from
and how its bytes are read is fetch.py's.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from j2c_server.core.manifest_plan import FilePlan, LayerPlan
from j2c_server.core.units import byte_size, count
from j2c_server.unpack.errors import DiskFull, LayerCorrupt
from j2c_server.unpack.fetch import (
    Stopped,
    blob_uri,
    download,
    file_sha256,
    layer_uri,
    short_digest,
    shown,
)
from j2c_server.unpack.log import Stage, say
from j2c_server.unpack.summary import add_bytes

Item = TypeVar("Item")
Result = TypeVar("Result")
_LAYER_WORKERS = 8
_FILE_WORKERS = 4


@dataclass(frozen=True)
class Fetched:
    layer: LayerPlan
    path: Path
    reused: bool
    seconds: float


def download_layers(manifest_uri: str, layers: list[LayerPlan], blob_dir: Path) -> list[Fetched]:
    """Every layer, verified, in ``blob_dir``; in ``layers``' order. Nothing is extracted from
    a partial set: a failure is raised only after every download has stopped."""
    blob_dir.mkdir(parents=True, exist_ok=True)
    total = sum(layer.size for layer in layers)
    stage = Stage("downloading", f"{count(len(layers), 'layer')}, {byte_size(total)}")

    def one(layer: LayerPlan, stop: threading.Event) -> Fetched:
        return _fetch_layer(layer_uri(manifest_uri, layer), layer, blob_dir, stop)

    fetched = _each(layers, one, _LAYER_WORKERS)
    sent = sum(f.layer.size for f in fetched if not f.reused)
    add_bytes(downloaded=sent, reused=sum(f.layer.size for f in fetched if f.reused))
    stage.done(f"{byte_size(sent)} fetched, {sum(f.reused for f in fetched)} reused")
    return fetched


def download_files(manifest_uri: str, unique: list[FilePlan], blob_dir: Path) -> dict[str, Path]:
    """Each big file's blob (one per digest), verified, in ``blob_dir``; digest -> path.
    DiskFull (74) first when those not there yet cannot fit."""
    total = sum(blob.size for blob in unique)
    stage = Stage("downloading", f"{len(unique)} big file blobs, {byte_size(total)}")
    blob_dir.mkdir(parents=True, exist_ok=True)
    _check_room(blob_dir, [b for b in unique if not _present(blob_dir, b)])

    def one(blob: FilePlan, stop: threading.Event) -> tuple[Path, bool]:
        return _fetch_file(file_uri(manifest_uri, blob), blob, blob_dir, stop)

    fetched = _each(unique, one, _FILE_WORKERS)
    reused = sum(1 for _, was_there in fetched if was_there)
    stage.done(f"{byte_size(total)} verified, {reused} reused")
    return {blob.digest: path for blob, (path, _) in zip(unique, fetched, strict=True)}


def file_uri(manifest_uri: str, blob: FilePlan) -> str:
    if blob.url:
        return blob.url
    return blob_uri(manifest_uri, blob.digest, ".file", what=f"big file {blob.path}")


def _each(
    items: list[Item], one: Callable[[Item, threading.Event], Result], workers: int
) -> list[Result]:
    """``one(item, stop)`` for every item on up to ``workers`` threads; the results in order."""
    stop = threading.Event()

    def guarded(item: Item) -> Result:
        try:
            return one(item, stop)
        except BaseException:
            stop.set()
            raise

    try:
        from concurrent.futures import ThreadPoolExecutor  # a warm start downloads nothing

        with ThreadPoolExecutor(max_workers=max(1, min(workers, len(items)))) as pool:
            futures = [pool.submit(guarded, item) for item in items]
    except BaseException:  # SIGTERM/SIGINT in the main thread: the downloads stop too
        stop.set()
        raise
    causes = [e for f in futures if (e := f.exception()) and not isinstance(e, Stopped)]
    if causes:
        raise causes[0]
    return [f.result() for f in futures]


def _fetch_layer(uri: str, layer: LayerPlan, blob_dir: Path, stop: threading.Event) -> Fetched:
    started = time.monotonic()
    expected = layer.digest.removeprefix("sha256:")
    dest = blob_dir / f"{expected}.tar.zst"
    if dest.exists() and file_sha256(dest) == expected:
        say(
            "verifying",
            f"{layer.role.value} layer {short_digest(layer.digest)}: reused from {dest}",
        )
        return Fetched(layer, dest, True, time.monotonic() - started)
    size = _download_verified(uri, dest, stop, layer, f"{layer.role.value} layer")
    seconds = time.monotonic() - started
    say(
        "verifying",
        f"{layer.role.value} layer {short_digest(layer.digest)}: sha256 ok "
        f"({byte_size(size)} in {seconds:.2f} s from {shown(uri)})",
    )
    return Fetched(layer, dest, False, seconds)


def _fetch_file(
    uri: str, blob: FilePlan, blob_dir: Path, stop: threading.Event
) -> tuple[Path, bool]:
    started = time.monotonic()
    expected = blob.digest.removeprefix("sha256:")
    dest = blob_dir / f"{expected}.file"
    if dest.exists() and file_sha256(dest) == expected:
        return dest, True
    size = _download_verified(uri, dest, stop, blob, f"big file {blob.path}")
    say(
        "verifying",
        f"big file {blob.path}: sha256 ok ({byte_size(size)} in "
        f"{time.monotonic() - started:.2f} s)",
    )
    return dest, False


def _download_verified(
    uri: str, dest: Path, stop: threading.Event, blob: LayerPlan | FilePlan, what: str
) -> int:
    """``uri`` into ``dest`` through ``dest.part``, renamed only when its sha256 and size are
    the manifest's (else LayerCorrupt naming ``what``); the size."""
    part = dest.with_name(dest.name + ".part")
    try:
        got, size = download(uri, part, stop, limit=blob.size)
        if got != blob.digest.removeprefix("sha256:") or size != blob.size:
            kind = "layers" if isinstance(blob, LayerPlan) else "files"
            found = (
                f"more than {blob.size} bytes (read no further than {size})"
                if size > blob.size
                else f"sha256:{got} ({size} bytes)"
            )
            raise LayerCorrupt(
                f"the {what} from {shown(uri)} does not match the manifest: expected "
                f"{blob.digest} ({blob.size} bytes), got {found}",
                field=f"{kind}.digest",
                hint="the stored blob is corrupt or was replaced; submit the job again to "
                "re-upload it",
            )
        os.replace(part, dest)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    return size


def _present(blob_dir: Path, blob: FilePlan) -> bool:
    return (blob_dir / f"{blob.digest.removeprefix('sha256:')}.file").exists()


def _check_room(blob_dir: Path, wanted: list[FilePlan]) -> None:
    """DiskFull (74) before downloading when the blobs cannot fit (they are moved, not copied,
    into the code folder when it is on the same filesystem, which relocate mode's is)."""
    need = sum(blob.size for blob in wanted)
    vfs = os.statvfs(blob_dir)
    free = vfs.f_bavail * vfs.f_frsize
    if need > free:
        raise DiskFull(
            f"not enough free space for this job's big files at {blob_dir}: they need "
            f"{byte_size(need)}, {byte_size(free)} are free",
            field="workdir",
            hint="free some space, choose a --workdir on a larger disk, or read the data from "
            "storage instead of shipping it",
        )
