"""A send's blobs held against the layer cache's eviction until they are published.

The layer cache (:mod:`.fingerprint`) is bounded: each new blob evicts the least recently used
ones beyond ``pack.layer_cache_max_mb``, keeping only the last few and each project's last
sends. A send packs, then publishes from the cache; with several sends of a project in flight,
a later pack could evict an earlier send's blob before that send's upload read it (the upload
then failed: "No such file"). So, once packed, a send's blobs get a second name, a hard link
under ``held/<job id>/`` in the cache, which eviction never touches; the send publishes from
there and drops the folder once its upload stage ended, whatever the outcome. A folder left by a
server that died mid-upload is removed once older than :data:`STALE_S` (a resumed job packs and
holds again).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import time
from pathlib import Path

from j2c_server.core.errors import ConfigError
from j2c_server.core.file_modes import private_dir
from j2c_server.pack.models import PackResult

HELD = "held"
STALE_S = 24 * 3600


def hold(result: PackResult, cache_dir: Path, owner: str) -> PackResult:
    """``result`` with each blob read from its own link under ``held/<owner>/``.

    Blocking: run it in a worker thread, right after the pack (before another pack can evict).
    """
    held = cache_dir / HELD
    private_dir(held)
    _drop_stale(held)
    folder = held / owner
    private_dir(folder)

    def link(path: Path) -> Path:
        target = folder / path.name
        try:
            os.link(path, target)
        except FileExistsError:  # content-addressed: the same bytes
            pass
        except OSError as exc:
            if exc.errno == errno.ENOENT:  # evicted by a later blob of the same pack
                raise ConfigError(
                    f"the layer cache evicted {path.name} while this send was being packed: "
                    "pack.layer_cache_max_mb is smaller than one send",
                    field="pack.layer_cache_max_mb",
                    hint="raise pack.layer_cache_max_mb above the size of a send's layers",
                ) from None
            return path  # a filesystem without hard links: read from the cache as before
        return target

    layers = [packed.model_copy(update={"path": link(packed.path)}) for packed in result.layers]
    files = [packed.model_copy(update={"path": link(packed.path)}) for packed in result.files]
    return result.model_copy(update={"layers": layers, "files": files})


def release(cache_dir: Path, owner: str) -> None:
    """Drop what :func:`hold` linked for ``owner`` (blobs the cache evicted meanwhile go)."""
    shutil.rmtree(cache_dir / HELD / owner, ignore_errors=True)


def _drop_stale(held: Path) -> None:
    cutoff = time.time() - STALE_S
    for folder in held.iterdir():
        with contextlib.suppress(OSError):
            if folder.stat().st_mtime < cutoff:
                shutil.rmtree(folder, ignore_errors=True)
