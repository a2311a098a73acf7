"""The layer cache: recognise an unchanged layer from its stat walk and reuse its blob.

A layer's fingerprint hashes its root, the compression level, the archive format and, for every
entry, path, kind, permission bits, size, mtime (ns) and symlink target: no file contents are
read. The cache directory (tagged with ``CACHEDIR.TAG`` so that no scan ever packs it) holds

- ``blobs/<hex>.tar.zst``: finished layers, named by the sha256 of their compressed bytes;
- ``layers/<fingerprint>.json``: fingerprint → digest, sizes and entry count.

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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ..private import private_dir, write_private_text
from .scan import FILE, ScannedLayer

ARCHIVE_FORMAT = "j2c-tar-zst-1"  # change when the bytes written for the same input change
RACY_WINDOW_NS = 2_000_000_000
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
    def __init__(self, root: Path) -> None:
        self.root = root
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
            if self.blob_path(cached.digest).stat().st_size == cached.size:
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
        return final

    def _atomic_write(self, path: Path, data: bytes) -> None:
        fd, name = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(name, path)
        finally:
            Path(name).unlink(missing_ok=True)
