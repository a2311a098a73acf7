"""The layer cache: recognise an unchanged layer from its stat walk and reuse its blob.

A layer's fingerprint hashes its root, the compression level, the archive format and, for every
entry, path, kind, permission bits, size, mtime (ns) and symlink target: no file contents are
read. The cache directory (tagged with ``CACHEDIR.TAG`` so that no scan ever packs it) holds

- ``blobs/<hex>.tar.zst``: finished layers, named by the sha256 of their compressed bytes;
- ``blobs/<hex>.file``: big files of a code layer, copied (never linked: the user may edit the
  original while it uploads), named by the sha256 of their bytes;
- ``layers/<fingerprint>.json``: fingerprint → digest, sizes and entry count;
- ``files/<stat key>.json``: a big file's stat (path, size, mtime, inode) → its digest, so an
  unchanged big file is never read again;
- ``projects/<hash of the project folder>.json``: the blobs of the project's last sends.

Bounded: after every new blob, the least recently used blobs (a hit sets its blob's access time) are
removed until the blobs add up to at most ``max_bytes`` (``pack.layer_cache_max_mb``); the
:data:`KEEP_RECENT` most recently used blobs are always kept (the layers of the last sends, which
may be uploading right now, even when one is larger than the cap), and so is the blob just
written, and so are the blobs of each project's last ``keep_sends`` sends
(``pack.layer_cache_keep_sends``): a project edited again after others were sent still finds its
venv layer. Index records whose blob is gone are removed with it.

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

from j2c_server.core.file_modes import private_dir, write_private_text
from j2c_server.pack.scan import FILE, ScannedLayer

ARCHIVE_FORMAT = "j2c-tar-zst-1"  # change when the bytes written for the same input change
RACY_WINDOW_NS = 2_000_000_000
DEFAULT_MAX_BYTES = 2048 * 1024 * 1024  # = config.PackSettings.layer_cache_max_mb
KEEP_RECENT = 4  # code + venv of the last two sends
DEFAULT_KEEP_SENDS = 2  # = config.PackSettings.layer_cache_keep_sends
BLOB_SUFFIXES = (".tar.zst", ".file")
_CACHEDIR_TAG = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This folder is j2c's layer cache; see https://bford.info/cachedir/\n"
)


def fingerprint(layer: ScannedLayer, compression_level: int) -> str:
    memo = ("fingerprint", compression_level)
    if (known := layer.memo.get(memo)) is not None:
        return str(known)  # a kept scan (:mod:`.venv_scans`): the same entries as last time
    digest = hashlib.sha256(
        f"{ARCHIVE_FORMAT}\0{layer.role.value}\0{layer.root}\0{compression_level}\n".encode()
    )
    lines = [
        f"{e.kind}\0{e.rel}\0{e.mode}\0{e.size}\0{e.mtime_ns}\0{e.link}\n" for e in layer.entries
    ]
    digest.update("".join(lines).encode())
    layer.memo[memo] = key = digest.hexdigest()
    return key


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


def file_key(root: Path, rel: str, size: int, mtime_ns: int, ino: int, dev: int) -> str:
    """A big file's stat key: any change of content moves its size or mtime (racy files are
    never recorded, as for layers)."""
    facts = f"{ARCHIVE_FORMAT}\0{root}\0{rel}\0{size}\0{mtime_ns}\0{ino}\0{dev}"
    return hashlib.sha256(facts.encode()).hexdigest()


class LayerCache:
    def __init__(
        self,
        root: Path,
        max_bytes: int = DEFAULT_MAX_BYTES,
        keep_sends: int = DEFAULT_KEEP_SENDS,
    ) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.keep_sends = keep_sends
        self.blobs = root / "blobs"
        self.index = root / "layers"
        self.file_index = root / "files"
        self.projects = root / "projects"
        for folder in (self.blobs, self.index, self.file_index, self.projects):
            private_dir(folder)
        private_dir(root)
        tag = root / "CACHEDIR.TAG"
        if not tag.exists():
            write_private_text(tag, _CACHEDIR_TAG)

    def blob_path(self, digest: str) -> Path:
        return self.blobs / f"{digest.partition(':')[2]}.tar.zst"

    def file_blob_path(self, digest: str) -> Path:
        return self.blobs / f"{digest.partition(':')[2]}.file"

    def lookup_file(self, key: str) -> tuple[str, int] | None:
        """The digest and size of the big file with this stat key, if its blob is still whole."""
        try:
            record = json.loads((self.file_index / f"{key}.json").read_text())
            digest, size = str(record["digest"]), int(record["size"])
            blob = self.file_blob_path(digest)
            st = blob.stat()
            if st.st_size == size:
                os.utime(blob, ns=(time.time_ns(), st.st_mtime_ns))
                return digest, size
        except (OSError, ValueError, TypeError, KeyError):
            pass
        return None

    def record_file(self, key: str, digest: str, size: int) -> None:
        data = json.dumps({"digest": digest, "size": size}).encode()
        self._atomic_write(self.file_index / f"{key}.json", data)

    def remember_send(self, project: Path, blobs: list[Path], *, amend: bool = False) -> None:
        """The blobs of this send of ``project``: kept (with the last ``keep_sends`` sends)
        whatever the cap. ``amend``: the same send, with more blobs (its base layers)."""
        record = self.projects / f"{hashlib.sha256(str(project).encode()).hexdigest()}.json"
        sends: list[list[str]] = []
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
            sends = [list(map(str, send)) for send in json.loads(record.read_text())["sends"]]
        names = sorted(path.name for path in blobs)
        if amend and sends and set(sends[0]) <= set(names):
            sends = sends[1:]
        sends = [names, *(send for send in sends if send != names)][: max(self.keep_sends, 0)]
        data = json.dumps({"project": str(project), "sends": sends}).encode()
        self._atomic_write(record, data)

    def _kept_by_projects(self) -> set[str]:
        kept: set[str] = set()
        for record in self.projects.glob("*.json"):
            with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
                for send in json.loads(record.read_text())["sends"][: self.keep_sends]:
                    kept.update(map(str, send))
        return kept

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
    def new_blob(self, suffix: str = ".tar.zst") -> Iterator[tuple[Path, BinaryIO]]:
        """A temporary blob file; removed unless :meth:`commit` moved it into place."""
        fd, name = tempfile.mkstemp(prefix=".tmp-", suffix=suffix, dir=self.blobs)
        path = Path(name)
        try:
            with os.fdopen(fd, "wb") as handle:
                yield path, handle
        finally:
            path.unlink(missing_ok=True)

    def commit(self, temporary: Path, digest: str, *, file: bool = False) -> Path:
        final = self.file_blob_path(digest) if file else self.blob_path(digest)
        os.replace(temporary, final)  # same bytes if it already existed: content-addressed
        self.prune(keep=final)
        return final

    def prune(self, keep: Path | None = None) -> list[Path]:
        """Remove least recently used blobs (and their index records) until the blobs fit in
        ``max_bytes``; never ``keep``, the :data:`KEEP_RECENT` most recent, nor the blobs of a
        project's last sends. The removed."""
        blobs: list[tuple[float, Path, int]] = []
        kept = self._kept_by_projects()
        for path in self.blobs.iterdir():
            if path.name.startswith(".tmp-") or not path.name.endswith(BLOB_SUFFIXES):
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
            if path == keep or path.name in kept:
                continue
            path.unlink(missing_ok=True)
            removed.append(path)
            total -= size
        if removed:
            self._drop_records({path.name for path in removed})
        return removed

    def _drop_records(self, blob_names: set[str]) -> None:
        for index, blob_path in (
            (self.index, self.blob_path),
            (self.file_index, self.file_blob_path),
        ):
            for record in index.glob("*.json"):
                with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
                    digest = json.loads(record.read_text())["digest"]
                    if blob_path(digest).name in blob_names:
                        record.unlink()

    def _atomic_write(self, path: Path, data: bytes) -> None:
        fd, name = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(name, path)
        finally:
            Path(name).unlink(missing_ok=True)
