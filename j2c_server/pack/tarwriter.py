"""Write one layer as a POSIX (ustar + pax) tar stream through a multi-threaded zstd compressor.

Python's ``tarfile`` spends most of its time per member (TarInfo objects, encodings, many small
writes), not compressing. Here a read-ahead thread turns the scanned entries into ~1 MiB pieces
of finished tar stream (headers built directly as bytes, file contents read whole or in 1 MiB
chunks) and the calling thread feeds them to zstd, whose worker threads compress while the next
pieces are read. The compressed bytes are hashed as they are written, so the digest costs no
second pass. Memory stays bounded: a few pieces in flight plus zstd's own job buffers.

Files are opened with ``O_NOFOLLOW`` and checked with ``fstat`` against the scan's device and
inode: a file swapped for a symlink (or anything else) between scan and read fails the pack
with the path named; it is never followed.

Archives are reproducible: entries in scan order, owner 0:0 without names, permission bits
only (no setuid/setgid/sticky), mtimes in whole seconds, and zstd always in multi-threaded mode
(whose output does not depend on the number of workers).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import queue
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, BinaryIO, cast

import zstandard

from j2c_server.pack.scan import DIR, FILE, SYMLINK, Entry

BLOCK = 512
PIECE = 1 << 20  # bytes of tar stream handed to zstd at a time, and the file read size
READ_AHEAD = 8  # pieces queued between the reader and the compressor
_MAX_OCTAL_11 = 8**11 - 1
_TYPEFLAGS = {FILE: b"0", SYMLINK: b"2", DIR: b"5"}
_PAX_NAME = b"././@PaxHeader"


def _pax_record(key: str, value: bytes) -> bytes:
    body = b" " + key.encode() + b"=" + value + b"\n"
    length = len(body) + len(str(len(body)))
    while len(str(length)) + len(body) != length:  # the length counts its own digits
        length = len(str(length)) + len(body)
    return str(length).encode() + body


_OWNER = b"0000000\0" * 2  # uid, gid: 0
_CHECKSUM_BLANK = b" " * 8  # the checksum field counts as spaces while summing
_USTAR_MAGIC = b"ustar\x0000"
_NO_NAMES_NO_DEVICE = b"\0" * 64 + b"0000000\0" * 2  # uname, gname, devmajor, devminor


def _ustar(
    name: bytes,
    mode: int,
    size: int,
    mtime: int,
    typeflag: bytes,
    linkname: bytes = b"",
    prefix: bytes = b"",
) -> bytes:
    head = b"".join(
        (
            name.ljust(100, b"\0"),
            b"%07o\0" % mode,
            _OWNER,
            b"%011o\0" % size,
            b"%011o\0" % mtime,
        )
    )
    tail = b"".join(
        (
            typeflag,
            linkname.ljust(100, b"\0"),
            _USTAR_MAGIC,
            _NO_NAMES_NO_DEVICE,
            prefix.ljust(155, b"\0"),
            b"\0" * 12,
        )
    )
    checksum = sum(head) + sum(tail) + sum(_CHECKSUM_BLANK)
    return head + b"%06o\0 " % checksum + tail


def _split_name(name: bytes) -> tuple[bytes, bytes] | None:
    """(prefix, name) fitting ustar's 155 + 100 bytes, split at a '/', or None."""
    if len(name) <= 100:
        return b"", name
    cut = name.rfind(b"/", 0, 156)
    if cut <= 0 or len(name) - cut - 1 > 100 or len(name) - cut - 1 == 0:
        return None
    return name[:cut], name[cut + 1 :]


def tar_header(entry: Entry) -> bytes:
    """The header block(s) of one entry: ustar, preceded by a pax header where ustar cannot
    hold a value (non-ASCII or long names and link targets, huge sizes, far-future mtimes)."""
    path = entry.rel + "/" if entry.kind == DIR else entry.rel
    name = path.encode()
    link = entry.link.encode()
    size = entry.size if entry.kind == FILE else 0
    mtime = max(0, entry.mtime_ns // 1_000_000_000)
    pax: list[bytes] = []
    split = _split_name(name) if name.isascii() else None
    if split is None:
        pax.append(_pax_record("path", name))
        split = (b"", name.decode().encode("ascii", "replace")[:100])
    if link and (not link.isascii() or len(link) > 100):
        pax.append(_pax_record("linkpath", link))
        link = link[:100] if link.isascii() else b""
    if size > _MAX_OCTAL_11:
        pax.append(_pax_record("size", str(size).encode()))
        size = 0
    if mtime > _MAX_OCTAL_11:
        pax.append(_pax_record("mtime", str(mtime).encode()))
        mtime = _MAX_OCTAL_11
    prefix, short = split
    header = _ustar(short, entry.mode & 0o777, size, mtime, _TYPEFLAGS[entry.kind], link, prefix)
    if not pax:
        return header
    records = b"".join(pax)
    padding = b"\0" * (-len(records) % BLOCK)
    return _ustar(_PAX_NAME, 0o644, len(records), 0, b"x") + records + padding + header


@dataclass
class WriteStats:
    files: int = 0
    bytes: int = 0
    changed: list[str] = field(default_factory=list)  # files whose size changed while read


@dataclass(frozen=True)
class _Piece:
    data: bytes
    files_done: int
    bytes_done: int


def _zeros(count: int) -> Iterator[bytes]:
    while count > 0:
        yield bytes(min(PIECE, count))
        count -= PIECE


_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def _open_scanned(path: str, entry: Entry) -> BinaryIO | None:
    """Open the file the scan saw, never following a symlink nor waiting on a FIFO; None when
    it is gone. A path that now names a symlink, a non-regular file or another inode raises
    OSError (with the filename): packing something the scan did not judge is never right."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(
                errno.ELOOP, "replaced by a symlink since the scan (not followed); pack again", path
            ) from None
        raise
    now = os.fstat(fd)
    swapped = not stat.S_ISREG(now.st_mode) or (
        entry.ino != 0 and (now.st_dev, now.st_ino) != (entry.dev, entry.ino)
    )
    if swapped:
        os.close(fd)
        raise OSError(errno.ESTALE, "replaced by another file since the scan; pack again", path)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb", buffering=0)


def _read_file(path: str, entry: Entry, stats: WriteStats) -> Iterator[bytes]:
    """The entry's contents, exactly ``entry.size`` bytes (a file that changed size while
    being packed is cut or zero-padded and reported, so the archive stays well-formed)."""
    handle = _open_scanned(path, entry)
    if handle is None:
        stats.changed.append(entry.rel)
        yield from _zeros(entry.size)
        return
    try:
        left = entry.size
        while left > 0:
            chunk = handle.read(min(PIECE, left))
            if not chunk:
                stats.changed.append(entry.rel)
                yield from _zeros(left)
                return
            left -= len(chunk)
            yield chunk
        if handle.read(1):
            stats.changed.append(entry.rel)
    finally:
        handle.close()


def tar_stream(root: str, entries: list[Entry], stats: WriteStats) -> Iterator[_Piece]:
    """The uncompressed tar stream in pieces of about ``PIECE`` bytes."""
    parts: list[bytes] = []
    pending = 0
    for entry in entries:
        header = tar_header(entry)
        parts.append(header)
        pending += len(header)
        if entry.kind == FILE:
            for chunk in _read_file(os.path.join(root, entry.rel), entry, stats):
                parts.append(chunk)
                pending += len(chunk)
                stats.bytes += len(chunk)
                if pending >= PIECE:
                    yield _Piece(b"".join(parts), stats.files, stats.bytes)
                    parts, pending = [], 0
            stats.files += 1
            if entry.size % BLOCK:
                parts.append(bytes(BLOCK - entry.size % BLOCK))
                pending += BLOCK - entry.size % BLOCK
        if pending >= PIECE:
            yield _Piece(b"".join(parts), stats.files, stats.bytes)
            parts, pending = [], 0
    parts.append(bytes(2 * BLOCK))  # end-of-archive marker
    yield _Piece(b"".join(parts), stats.files, stats.bytes)


def _read_ahead(pieces: Iterator[_Piece]) -> Iterator[_Piece]:
    """Run ``pieces`` in a thread, at most ``READ_AHEAD`` pieces ahead of the consumer."""
    slots: queue.Queue[_Piece | BaseException | None] = queue.Queue(READ_AHEAD)
    stop = threading.Event()

    def produce() -> None:
        try:
            for piece in pieces:
                if stop.is_set():
                    return
                slots.put(piece)
            slots.put(None)
        except BaseException as exc:  # handed to the consumer, which re-raises it
            slots.put(exc)

    thread = threading.Thread(target=produce, name="j2c-pack-reader", daemon=True)
    thread.start()
    try:
        while True:
            item = slots.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while thread.is_alive():  # unblock a producer waiting on a full queue
            with contextlib.suppress(queue.Empty):
                slots.get(timeout=0.1)
        thread.join()


class _HashingSink:
    """Where zstd writes: the blob file, hashed on the way."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.sha256 = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.sha256.update(data)
        self.out.write(data)
        self.size += len(data)
        return len(data)

    def flush(self) -> None:
        self.out.flush()


ProgressFn = Callable[[int, int], None]  # (files done, bytes done)


@dataclass
class Written:
    digest: str  # 'sha256:<hex>' of the compressed bytes
    size: int  # compressed bytes
    stats: WriteStats


def write_layer(
    root: str,
    entries: list[Entry],
    out: BinaryIO,
    *,
    level: int,
    threads: int,
    progress: ProgressFn | None = None,
    interval_s: float = 0.1,
) -> Written:
    """Write ``entries`` (relative to ``root``) as tar.zst into ``out``."""
    workers = threads if threads > 0 else (os.cpu_count() or 1)
    compressor = zstandard.ZstdCompressor(level=level, threads=workers, write_checksum=True)
    sink = _HashingSink(out)
    stats = WriteStats()
    last = time.monotonic()
    # zstandard only calls write() and flush() on its destination.
    with compressor.stream_writer(cast(IO[bytes], sink), closefd=False) as writer:
        for piece in _read_ahead(tar_stream(root, entries, stats)):
            writer.write(piece.data)
            if progress is not None and time.monotonic() - last >= interval_s:
                progress(piece.files_done, piece.bytes_done)
                last = time.monotonic()
    return Written("sha256:" + sink.sha256.hexdigest(), sink.size, stats)
