"""The node cache's blob entries: each layer's and each big file's verified download, kept.

``b-<hex>`` holds a layer's ``tar.zst``, ``f-<hex>`` a big file of the code layer. Both follow
the cache's protocol (:mod:`.node`): a shared ``.use`` lock while the job runs, found without
the make lock, else looked for again under it and downloaded once.

A blob is what the manifest pins: its sha256 is the job's own (``--manifest-digest`` pins the
manifest, the manifest every blob), so a blob is checked against it, byte by byte, every time a
job uses it, never trusted from a record in the cache (whoever shares the cache's uid could
rewrite a blob and its record alike):

- a code layer's blob is copied into the job's own folder as it is hashed, and the job extracts
  that copy: what it runs is what was checked, and the code never comes from a tree in the cache;
- a venv layer's blob (and the base packages') is hashed before a new entry is extracted from it;
- a big file's blob is hashed as it is copied into the job's code folder (bigfiles.py); one that
  does not match is refused, fetched again, and copied again (:func:`refetch_file`).

One that does not match its digest is refused (logged) and downloaded again.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING

from j2c_server.core.manifest_plan import FilePlan, LayerPlan
from j2c_server.unpack.cache.files import Refused, rmtree, unsafe, write_json
from j2c_server.unpack.errors import LayerCorrupt, LocalIOError
from j2c_server.unpack.log import say, warn
from j2c_server.unpack.summary import add_bytes

if TYPE_CHECKING:
    from j2c_server.unpack.cache.node import Cache

_CHUNK = 1024 * 1024
_OPEN_FLAGS = os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
DATA = "data.tar.zst"  # the blob's file in its entry (a big file's too)


def layer_blobs(
    cache: Cache,
    manifest_uri: str,
    layers: list[LayerPlan],
    download_dir: Path,
    *,
    copy_to: Path | None = None,
) -> tuple[dict[str, Path], int]:
    """Each layer's blob in the cache, its sha256 checked: found, or downloaded (once) and kept.
    With ``copy_to`` (a folder of the job's own), each blob is copied there as it is hashed, and
    the copy is what is returned: the job then extracts exactly the bytes that were checked.
    Returns hex digest -> path, and how many blobs were downloaded."""
    found: dict[str, Path] = {}
    makes: list[int] = []
    wanted: list[LayerPlan] = []
    try:
        for layer in sorted(layers, key=lambda item: item.digest):
            hexdigest = layer.digest.removeprefix("sha256:")
            key = f"b-{hexdigest}"
            target = copy_to / f"{hexdigest}.tar.zst" if copy_to is not None else None
            cache.lock(key, "use", fcntl.LOCK_SH)
            if path := _cached_blob(cache, key, layer, repair=False, copy_to=target):
                found[hexdigest] = path
                add_bytes(reused=layer.size)
                continue
            makes.append(cache.lock(key, "make", fcntl.LOCK_EX))
            if path := _cached_blob(cache, key, layer, repair=True, copy_to=target):
                found[hexdigest] = path
                add_bytes(reused=layer.size)
            else:
                wanted.append(layer)
        if wanted:
            from j2c_server.unpack.downloads import download_layers  # a cold start's

            try:
                for fetched in download_layers(manifest_uri, wanted, download_dir):
                    hexdigest = fetched.layer.digest.removeprefix("sha256:")
                    kept = _keep_blob(cache, f"b-{hexdigest}", fetched.path)
                    if copy_to is None:
                        found[hexdigest] = kept
                        continue
                    target = copy_to / f"{hexdigest}.tar.zst"
                    if not copy_verified(kept, target, hexdigest):
                        raise LayerCorrupt(
                            f"the {fetched.layer.role.value} layer {hexdigest[:12]} changed in "
                            "the node cache right after it was downloaded and verified",
                            field="cache_dir",
                            hint="another process that can write the cache folder is changing "
                            "it: give jobs a cache folder of their own",
                        )
                    found[hexdigest] = target
            finally:
                rmtree(download_dir)
    finally:
        for fd in makes:
            os.close(fd)
    return found, len(wanted)


def file_blobs(
    cache: Cache, manifest_uri: str, blobs: list[FilePlan]
) -> tuple[dict[str, Path], set[str]]:
    """Each big file's blob (one per digest) in the cache, as ``f-<hex>`` entries: found, or
    downloaded once and kept; held (use lock) until the job ends. Digest -> path, and the
    digests downloaded now (verified as they were written). A found one is checked as it is
    copied into the job's code folder (bigfiles.py), not here: one read of it, not two."""
    found: dict[str, Path] = {}
    makes: list[int] = []
    wanted: list[FilePlan] = []
    try:
        for blob in sorted(blobs, key=lambda item: item.digest):
            key = f"f-{blob.digest.removeprefix('sha256:')}"
            os.utime(cache.lock(key, "use", fcntl.LOCK_SH))  # used now: evicted last
            if path := _cached_blob(cache, key, blob, repair=False, hashed=False):
                found[blob.digest] = path
                continue
            makes.append(cache.lock(key, "make", fcntl.LOCK_EX))
            if path := _cached_blob(cache, key, blob, repair=True, hashed=False):
                found[blob.digest] = path
            else:
                wanted.append(blob)
        found.update(_download_files(cache, manifest_uri, wanted))
    finally:
        for fd in makes:
            os.close(fd)
    say("cache", f"{len(blobs) - len(wanted)} of {len(blobs)} big files from the cache")
    return found, {blob.digest for blob in wanted}


def refetch_file(cache: Cache, manifest_uri: str, blob: FilePlan, why: str) -> Path:
    """The big file ``blob``'s entry, which did not hash to its digest (``why``), removed and
    downloaded again (under its make lock); the new blob's path."""
    key = f"f-{blob.digest.removeprefix('sha256:')}"
    say("cache", f"big file {blob.path}: entry refused ({why}); fetching it again")
    fd = cache.lock(key, "make", fcntl.LOCK_EX)
    try:
        cache.remove(cache.entries / key)
        return _download_files(cache, manifest_uri, [blob])[blob.digest]
    finally:
        os.close(fd)


def _download_files(cache: Cache, manifest_uri: str, wanted: list[FilePlan]) -> dict[str, Path]:
    if not wanted:
        return {}
    from j2c_server.unpack.downloads import download_files  # a cold start's

    blob_dir = cache.tmp / f"download-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        fetched = download_files(manifest_uri, wanted, blob_dir)
        return {
            digest: _keep_blob(cache, f"f-{digest.removeprefix('sha256:')}", path)
            for digest, path in fetched.items()
        }
    finally:
        rmtree(blob_dir)


def _cached_blob(
    cache: Cache,
    key: str,
    layer: LayerPlan | FilePlan,
    *,
    repair: bool,
    copy_to: Path | None = None,
    hashed: bool = True,
) -> Path | None:
    """The cached blob, checked: the cache's own, and (``hashed``) its sha256 the digest's; with
    ``copy_to``, copied there as it is hashed (the copy is returned). None when it is not there
    or is refused; with ``repair`` (the make lock is held) a refused one is removed."""
    entry = cache.entries / key
    try:
        cache.read_meta(entry)
        data = entry / DATA
        if why := unsafe(os.lstat(data), cache.owners, folder=False):
            raise Refused(f"its blob {why}")
        expected = layer.digest.removeprefix("sha256:")
        if copy_to is not None:
            if not copy_verified(data, copy_to, expected):
                raise Refused(f"its blob does not hash to {layer.digest}")
            return copy_to
        if hashed and file_digest(data) != expected:
            raise Refused(f"its blob does not hash to {layer.digest}")
        return data
    except FileNotFoundError:
        return None
    except Refused as exc:
        if repair:
            warn("cache", f"blob {key[2:14]}: entry refused ({exc}); fetching it again")
            cache.remove(entry)
        return None


def copy_verified(source: Path, target: Path, hexdigest: str, mode: int = 0o600) -> bool:
    """``source`` copied to ``target`` (new, ``mode``) as its bytes are hashed; True when they
    hash to ``hexdigest``, else the copy is removed and False. The copy, not ``source``, is
    what was checked: nothing read later from ``source`` is trusted."""
    digest = hashlib.sha256()
    try:
        src = os.open(source, os.O_RDONLY | _OPEN_FLAGS)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise Refused(f"it cannot be read ({exc.strerror or exc})") from None
    target.unlink(missing_ok=True)  # the job's own folder: a restarted job's earlier copy
    try:
        out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _OPEN_FLAGS, mode)
    except OSError as exc:
        os.close(src)
        raise LocalIOError(f"cannot write {target}: {exc.strerror or exc}") from None
    try:
        while chunk := os.read(src, _CHUNK):
            digest.update(chunk)
            view = memoryview(chunk)
            while view:
                view = view[os.write(out, view) :]
    except OSError as exc:
        os.close(out)
        target.unlink(missing_ok=True)
        raise LocalIOError(f"cannot copy {source} to {target}: {exc.strerror or exc}") from None
    finally:
        os.close(src)
    os.close(out)
    if digest.hexdigest() != hexdigest:
        target.unlink(missing_ok=True)
        return False
    return True


def file_digest(path: Path) -> str:
    """sha256 (hex) of a cached file's bytes, opened without following a link."""
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | _OPEN_FLAGS)
    try:
        while chunk := os.read(fd, _CHUNK):
            digest.update(chunk)
    finally:
        os.close(fd)
    return digest.hexdigest()


def _keep_blob(cache: Cache, key: str, downloaded: Path) -> Path:
    building = cache.building(key)
    data = building / DATA
    os.replace(downloaded, data)
    os.chmod(data, 0o444)
    write_json(building / "meta.json", {"kind": "blob", "bytes": os.lstat(data).st_size})
    os.rename(building, cache.entries / key)
    return cache.entries / key / DATA
