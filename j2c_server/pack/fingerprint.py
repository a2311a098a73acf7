"""The layer cache: recognise an unchanged layer from its stat walk and reuse its blob.

A layer's fingerprint hashes its root, the compression level, the archive format and, for every
entry, path, kind, permission bits, size, mtime (ns) and symlink target: no file contents are
read. The cache directory (tagged with ``CACHEDIR.TAG`` so that no scan ever packs it) holds

- ``blobs/<hex>.tar.zst``: finished layers, named by the sha256 of their compressed bytes;
- ``layers/<fingerprint>.json``: fingerprint → digest, sizes and entry count.

Bounded: after every new blob, the least recently used blobs (a hit sets its blob's access time) are
removed until the blobs add up to at most ``max_bytes`` (``pack.layer_cache_max_mb``); the
:data:`KEEP_RECENT` most recently used blobs are always kept (the layers of the last sends, which
may be uploading right now, even when one is larger than the cap), and so is the blob just
written. Index records whose blob is gone are removed with it.

Like git's index, a stat fingerprint cannot see a change that keeps size and mtime. Files
modified within :data:`RACY_WINDOW_NS` before the pack started could still change within the
same mtime tick, so a layer holding such a file is packed but its fingerprint is not recorded.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ..private import private_dir, write_private_text
from .scan import FILE, ScannedLayer

ARCHIVE_FORMAT = "j2c-tar-zst-1"  # change when the bytes written for the same input change
RACY_WINDOW_NS = 2_000_000_000
DEFAULT_MAX_BYTES = 2048 * 1024 * 1024  # = config.PackSettings.layer_cache_max_mb
KEEP_RECENT = 4  # code + venv of the last two sends
_CACHEDIR_TAG = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This folder is j2c's layer cache; see https://bford.info/cachedir/\n"
)


def fingerprint(layer: ScannedLayer, compression_level: int) -> str:
    digest = hashlib.sha256(
        f"{ARCHIVE_FORMAT}\0{layer.role.value}\0{layer.root}\0{compression_level}\n".encode()
    )
    lines = [
        f"{e.kind}\0{e.rel}\0{e.mode}\0{e.size}\0{e.mtime_ns}\0{e.link}\n" for e in layer.entries
    ]
    digest.update("".join(lines).encode())
    return digest.hexdigest()


def is_racy(layer: ScannedLayer, started_ns: int) -> bool:
    """Some file changed so recently that a same-size rewrite could keep its mtime."""
    newest = max((e.mtime_ns for e in layer.entries if e.kind == FILE), default=0)
    return newest >= started_ns - RACY_WINDOW_NS


@dataclass(frozen=True)
class CachedLayer:
    digest: str
    size: int
    files: int
    unpacked_size: int


class LayerCache:
    def __init__(self, root: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.blobs = root / "blobs"
        self.index = root / "layers"
        for folder in (self.blobs, self.index):
            private_dir(folder)
        private_dir(root)
        tag = root / "CACHEDIR.TAG"
        if not tag.exists():
            write_private_text(tag, _CACHEDIR_TAG)

    def blob_path(self, digest: str) -> Path:
        return self.blobs / f"{digest.partition(':')[2]}.tar.zst"

    def lookup(self, key: str) -> CachedLayer | None:
        """The cached layer for this fingerprint, if its blob is still there and whole."""
        try:
            cached = CachedLayer(**json.loads((self.index / f"{key}.json").read_text()))
            blob = self.blob_path(cached.digest)
            st = blob.stat()
            if st.st_size == cached.size:
                # Used now (the last to be evicted): its access time, never its mtime, which
                # dates the manifest (the same layers must give the same manifest digest).
                os.utime(blob, ns=(time.time_ns(), st.st_mtime_ns))
                return cached
        except (OSError, ValueError, TypeError):
            pass
        return None

    def record(self, key: str, layer: CachedLayer) -> None:
        data = json.dumps(layer.__dict__).encode()
        self._atomic_write(self.index / f"{key}.json", data)

    @contextlib.contextmanager
    def new_blob(self) -> Iterator[tuple[Path, BinaryIO]]:
        """A temporary blob file; removed unless :meth:`commit` moved it into place."""
        fd, name = tempfile.mkstemp(prefix=".tmp-", suffix=".tar.zst", dir=self.blobs)
        path = Path(name)
        try:
            with os.fdopen(fd, "wb") as handle:
                yield path, handle
        finally:
            path.unlink(missing_ok=True)

    def commit(self, temporary: Path, digest: str) -> Path:
        final = self.blob_path(digest)
        os.replace(temporary, final)  # same bytes if it already existed: content-addressed
        self.prune(keep=final)
        return final

    def prune(self, keep: Path | None = None) -> list[Path]:
        """Remove least recently used blobs (and their index records) until the blobs fit in
        ``max_bytes``; never ``keep`` nor the :data:`KEEP_RECENT` most recent. The removed."""
        blobs: list[tuple[float, Path, int]] = []
        for path in self.blobs.glob("*.tar.zst"):
            if path.name.startswith(".tmp-"):
                continue
            with contextlib.suppress(OSError):
                st = path.stat()
                blobs.append((max(st.st_atime, st.st_mtime), path, st.st_size))
        blobs.sort(reverse=True)  # most recently used (or written) first
        total = sum(size for _, _, size in blobs)
        removed: list[Path] = []
        for _, path, size in reversed(blobs[KEEP_RECENT:]):
            if total <= self.max_bytes:
                break
            if path == keep:
                continue
            path.unlink(missing_ok=True)
            removed.append(path)
            total -= size
        if removed:
            self._drop_records({path.name for path in removed})
        return removed

    def _drop_records(self, blob_names: set[str]) -> None:
        for record in self.index.glob("*.json"):
            with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
                digest = json.loads(record.read_text())["digest"]
                if self.blob_path(digest).name in blob_names:
                    record.unlink()

    def _atomic_write(self, path: Path, data: bytes) -> None:
        fd, name = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(name, path)
        finally:
            Path(name).unlink(missing_ok=True)
