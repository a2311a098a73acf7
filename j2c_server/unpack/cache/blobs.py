"""The node cache's blob entries: each layer's and each big file's verified download, kept.

``b-<hex>`` holds a layer's ``tar.zst`` (extracted into a tree entry, :mod:`.build`),
``f-<hex>`` a big file of the code layer (copied into each job's code folder, bigfiles.py). Both
follow the cache's protocol (:mod:`.cache`): a shared ``.use`` lock while the job runs, found
without the make lock, else looked for again under it and downloaded once. A blob's stat is
recorded; one whose stat changed is hashed again before it is used.
"""

from __future__ import annotations

import fcntl
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING

from j2c_server.core.manifest_plan import FilePlan, LayerPlan
from j2c_server.unpack.cache.files import Refused, rmtree, unsafe, write_json
from j2c_server.unpack.downloads import download_files, download_layers
from j2c_server.unpack.fetch import file_sha256
from j2c_server.unpack.log import say, warn
from j2c_server.unpack.summary import add_bytes

if TYPE_CHECKING:
    from j2c_server.unpack.cache.node import Cache


def layer_blobs(
    cache: Cache, manifest_uri: str, layers: list[LayerPlan], blob_dir: Path
) -> dict[str, Path]:
    """Each layer's verified blob in the cache: found, or downloaded (once) and kept."""
    found: dict[str, Path] = {}
    makes: list[int] = []
    wanted: list[LayerPlan] = []
    try:
        for layer in sorted(layers, key=lambda item: item.digest):
            key = f"b-{layer.digest.removeprefix('sha256:')}"
            cache.lock(key, "use", fcntl.LOCK_SH)
            if path := _cached_blob(cache, key, layer, repair=False):
                found[layer.digest.removeprefix("sha256:")] = path
                add_bytes(reused=layer.size)
                continue
            makes.append(cache.lock(key, "make", fcntl.LOCK_EX))
            if path := _cached_blob(cache, key, layer, repair=True):
                found[layer.digest.removeprefix("sha256:")] = path
                add_bytes(reused=layer.size)
            else:
                wanted.append(layer)
        if wanted:
            try:
                for fetched in download_layers(manifest_uri, wanted, blob_dir):
                    hexdigest = fetched.layer.digest.removeprefix("sha256:")
                    found[hexdigest] = _keep_blob(cache, f"b-{hexdigest}", fetched.path)
            finally:
                rmtree(blob_dir)
    finally:
        for fd in makes:
            os.close(fd)
    return found


def file_blobs(cache: Cache, manifest_uri: str, blobs: list[FilePlan]) -> dict[str, Path]:
    """Each big file's verified blob (one per digest) in the cache, as ``f-<hex>`` entries:
    found, or downloaded once and kept; held (use lock) until the job ends. Digest -> path."""
    found: dict[str, Path] = {}
    makes: list[int] = []
    wanted: list[FilePlan] = []
    try:
        for blob in sorted(blobs, key=lambda item: item.digest):
            key = f"f-{blob.digest.removeprefix('sha256:')}"
            os.utime(cache.lock(key, "use", fcntl.LOCK_SH))  # used now: evicted last
            if path := _cached_blob(cache, key, blob, repair=False):
                found[blob.digest] = path
                continue
            makes.append(cache.lock(key, "make", fcntl.LOCK_EX))
            if path := _cached_blob(cache, key, blob, repair=True):
                found[blob.digest] = path
            else:
                wanted.append(blob)
        if wanted:
            blob_dir = cache.tmp / f"download-{os.getpid()}-{secrets.token_hex(4)}"
            try:
                for digest, path in download_files(manifest_uri, wanted, blob_dir).items():
                    found[digest] = _keep_blob(cache, f"f-{digest.removeprefix('sha256:')}", path)
            finally:
                rmtree(blob_dir)
    finally:
        for fd in makes:
            os.close(fd)
    say("cache", f"{len(blobs) - len(wanted)} of {len(blobs)} big files from the cache")
    return found


def _cached_blob(
    cache: Cache, key: str, layer: LayerPlan | FilePlan, *, repair: bool
) -> Path | None:
    """The cached blob, checked: its stat as recorded, else its sha256 again. With
    ``repair`` (the make lock is held) a refused one is removed."""
    entry = cache.entries / key
    try:
        meta = cache.read_meta(entry)
        data = entry / "data.tar.zst"
        st = os.lstat(data)
        if why := unsafe(st, cache.owners, folder=False):
            raise Refused(f"its blob {why}")
        if _blob_stat(st) != meta.get("stat"):
            if file_sha256(data) != layer.digest.removeprefix("sha256:"):
                raise Refused("its blob no longer matches its digest")
            meta["stat"] = _blob_stat(st)
            write_json(entry / "meta.json", meta)
            say("cache", f"blob {key[2:14]}: changed on disk, sha256 checked again: ok")
        return data
    except FileNotFoundError:
        return None
    except Refused as exc:
        if repair:
            warn("cache", f"blob {key[2:14]}: entry refused ({exc}); fetching it again")
            cache.remove(entry)
        return None


def _keep_blob(cache: Cache, key: str, downloaded: Path) -> Path:
    building = cache.building(key)
    data = building / "data.tar.zst"
    os.replace(downloaded, data)
    os.chmod(data, 0o444)
    st = os.lstat(data)
    write_json(
        building / "meta.json", {"kind": "blob", "bytes": st.st_size, "stat": _blob_stat(st)}
    )
    os.rename(building, cache.entries / key)
    return cache.entries / key / "data.tar.zst"


def _blob_stat(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev, st.st_mode]
