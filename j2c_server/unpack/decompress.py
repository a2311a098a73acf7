"""A layer's decompressed tar stream, produced by a background thread (zstd releases the GIL, so
decompression overlaps the writing) and read forwards only, with bounded memory: at most
``PREFETCH_CHUNKS`` chunks of ``CHUNK`` bytes in flight."""

from __future__ import annotations

import contextlib
import os
import queue
import tarfile
import threading
from typing import BinaryIO

import zstandard

CHUNK = 1024 * 1024
PREFETCH_CHUNKS = 8


class Decompressed:
    """The decompressed tar stream, produced by a background thread, read forwards only.

    tarfile reads headers through ``read``/``seek``/``tell`` (its seeks only ever go forwards
    here); file data goes straight to the output file with ``copy_to``. At most
    ``PREFETCH_CHUNKS`` chunks of ``CHUNK`` bytes wait in the queue.
    """

    def __init__(self, compressed: BinaryIO) -> None:
        self._queue: queue.Queue[bytes | BaseException] = queue.Queue(PREFETCH_CHUNKS)
        self._closed = threading.Event()
        self._chunk = memoryview(b"")
        self._eof = False
        self._position = 0
        self._thread = threading.Thread(
            target=self._produce, args=(compressed,), name="j2c-zstd", daemon=True
        )
        self._thread.start()

    def __enter__(self) -> Decompressed:
        return self

    def __exit__(self, *_: object) -> None:
        self._closed.set()
        while self._thread.is_alive():  # unblock a producer waiting on a full queue
            with contextlib.suppress(queue.Empty):
                self._queue.get(timeout=0.05)
        self._thread.join()

    def _produce(self, compressed: BinaryIO) -> None:
        item: bytes | BaseException
        try:
            reader = zstandard.ZstdDecompressor().stream_reader(compressed, read_size=CHUNK)
            while not self._closed.is_set():
                item = reader.read(CHUNK)
                self._put(item)
                if not item:
                    return
        except BaseException as exc:  # handed to the reading thread, which raises it
            self._put(exc)

    def _put(self, item: bytes | BaseException) -> None:
        while not self._closed.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return
            except queue.Full:
                continue

    def _available(self) -> memoryview:
        """The unread part of the current chunk, fetching the next one when it is used up."""
        if not self._chunk and not self._eof:
            item = self._queue.get()
            if isinstance(item, BaseException):
                raise item
            self._eof = not item
            self._chunk = memoryview(item)
        return self._chunk

    def _take(self, size: int) -> memoryview:
        chunk = self._available()
        piece, self._chunk = chunk[:size], chunk[size:]
        self._position += len(piece)
        return piece

    # The file-object protocol tarfile needs.

    def read(self, size: int = -1) -> bytes:
        if size < 0:
            raise ValueError("read() of the whole stream is not supported")
        pieces = []
        while size > 0 and (piece := self._take(size)):
            pieces.append(piece)
            size -= len(piece)
        return b"".join(pieces)

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        if whence != os.SEEK_SET:
            raise OSError("the decompressed stream only seeks to absolute positions")
        self.skip_to(offset)
        return self._position

    # What the extraction uses directly.

    def skip_to(self, offset: int) -> None:
        if offset < self._position:
            raise tarfile.ReadError("the archive asks to read backwards: not a plain tar stream")
        while self._position < offset and self._take(offset - self._position):
            pass

    def copy_to(self, fd: int, size: int) -> None:
        """Write the next ``size`` bytes of the stream to ``fd``."""
        while size > 0:
            piece = self._take(size)
            if not piece:
                raise tarfile.ReadError("unexpected end of data inside a file entry")
            size -= len(piece)
            while piece:
                piece = piece[os.write(fd, piece) :]
