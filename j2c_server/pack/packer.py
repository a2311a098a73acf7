"""``pack``: validate and scan (see :mod:`.plan`), then write each changed layer into the cache.

Big files of the code layer (``PackSpec.big_file_bytes`` and up) are not written into the code
layer: each is copied into the cache as its own blob (hashed on the way), recognised by its stat
on the next pack, and listed in the manifest's ``files``; the code layer's fingerprint covers the
small files only, so an edit of one small file re-packs kilobytes, and an edit of the big file
re-copies that file alone.

The small files of the code layer are then cut into parts (``PackSpec.code_part_bytes``,
:mod:`.parts`), each its own layer with its own fingerprint: an edit re-packs one part, the
others are recognised without reading their files. A layer that fits in one part is packed as
before.

Synchronous and CPU-bound by design: callers on an event loop run it with ``asyncio.to_thread``.
Nothing is written before validation passes; a failed write leaves no partial blob behind.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import os
import time
from collections.abc import Callable
from pathlib import Path

from j2c_server.core.errors import PackError
from j2c_server.pack.fingerprint import (
    RACY_WINDOW_NS,
    CachedLayer,
    LayerCache,
    file_key,
    fingerprint,
    is_racy,
)
from j2c_server.pack.models import (
    PackedFile,
    PackedLayer,
    PackProgress,
    PackResult,
    PackSpec,
    PackWarning,
)
from j2c_server.pack.parts import split_layer
from j2c_server.pack.plan import Prepared, big_entries, prepare
from j2c_server.pack.scan import Entry, ScannedLayer
from j2c_server.pack.tarwriter import write_layer
from j2c_server.wire.manifest import FileBlob, Layer, LayerRole

_CHUNK = 1024 * 1024

ProgressCallback = Callable[[PackProgress], None]
_FIELD = {LayerRole.code: "code_path", LayerRole.venv: "venv_path", LayerRole.base: "venv_path"}


def _layer_model(scanned: ScannedLayer, cached: CachedLayer) -> Layer:
    return Layer(
        role=scanned.role,
        digest=cached.digest,
        size=cached.size,
        files=cached.files,
        unpacked_size=cached.unpacked_size,
        source_path=str(scanned.root),
    )


def _pack_layer(
    scanned: ScannedLayer,
    spec: PackSpec,
    cache: LayerCache,
    started_ns: int,
    progress: ProgressCallback | None,
) -> tuple[PackedLayer, list[str]]:
    """The layer's blob, reused or written; also the files that changed while being read."""
    started = time.perf_counter()
    role = scanned.role
    files_total = len(scanned.files)
    bytes_total = scanned.bytes
    key = fingerprint(scanned, spec.compression_level)
    cached = cache.lookup(key)
    if cached is not None:
        if progress is not None:
            progress(PackProgress(role, files_total, files_total, bytes_total, bytes_total, True))
        packed = PackedLayer(
            layer=_layer_model(scanned, cached),
            path=cache.blob_path(cached.digest),
            reused=True,
            seconds=time.perf_counter() - started,
        )
        return packed, []

    def report(files_done: int, bytes_done: int) -> None:
        if progress is not None:
            progress(PackProgress(role, files_done, files_total, bytes_done, bytes_total))

    report(0, 0)
    with cache.new_blob() as (temporary, handle):
        try:
            written = write_layer(
                str(scanned.root),
                scanned.entries,
                handle,
                level=spec.compression_level,
                threads=spec.threads,
                progress=report,
            )
        except OSError as exc:
            if exc.filename is None:  # writing the blob failed (disk full, ...): not the input
                raise
            raise PackError(
                f"cannot pack the {role.value} layer: {exc.filename}: {exc.strerror}",
                field=_FIELD[role],
            ) from None
        handle.flush()
        cached = CachedLayer(written.digest, written.size, len(scanned.entries), bytes_total)
        path = cache.commit(temporary, written.digest)
    if not written.stats.changed and not is_racy(scanned, started_ns):
        cache.record(key, cached)
    report(files_total, bytes_total)
    packed = PackedLayer(
        layer=_layer_model(scanned, cached),
        path=path,
        reused=False,
        seconds=time.perf_counter() - started,
    )
    return packed, written.stats.changed


def _part_progress(
    progress: ProgressCallback, files_before: int, bytes_before: int, whole: ScannedLayer
) -> ProgressCallback:
    """A part's progress as the whole code layer's: cumulative over its parts."""
    files_total = len(whole.files)
    bytes_total = whole.bytes

    def report(part: PackProgress) -> None:
        progress(
            PackProgress(
                part.role,
                files_before + part.files_done,
                files_total,
                bytes_before + part.bytes_done,
                bytes_total,
            )
        )

    return report


def _split(scanned: ScannedLayer, threshold: int) -> tuple[ScannedLayer, list[Entry]]:
    """The code layer without its big files, and the big files."""
    big = big_entries(scanned, threshold)
    if not big:
        return scanned, []
    names = {entry.rel for entry in big}
    small = [entry for entry in scanned.entries if entry.rel not in names]
    return dataclasses.replace(scanned, entries=small), big


def _pack_file(
    root: Path, entry: Entry, cache: LayerCache, started_ns: int
) -> tuple[PackedFile, bool]:
    """A big file's blob, reused by its stat or copied (and hashed) into the cache; also
    whether it changed while being copied."""
    key = file_key(root, entry.rel, entry.size, entry.mtime_ns, entry.ino, entry.dev)
    mode = entry.mode & 0o777
    found = cache.lookup_file(key)
    if found is not None:
        digest, size = found
        blob = FileBlob(path=entry.rel, digest=digest, size=size, mode=mode)
        return PackedFile(file=blob, path=cache.file_blob_path(digest), reused=True), False
    source_path = root / entry.rel
    hasher = hashlib.sha256()
    size = 0
    with cache.new_blob(".file") as (temporary, handle):
        try:
            with open(source_path, "rb") as source:
                st = os.fstat(source.fileno())
                while chunk := source.read(_CHUNK):
                    hasher.update(chunk)
                    handle.write(chunk)
                    size += len(chunk)
                after = os.fstat(source.fileno())
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):  # the cache's disk, not the input
                raise
            raise PackError(
                f"cannot pack the big file {entry.rel}: {exc.strerror}", field="code_path"
            ) from None
        handle.flush()
        digest = "sha256:" + hasher.hexdigest()
        path = cache.commit(temporary, digest, file=True)
    changed = (st.st_size, st.st_mtime_ns) != (entry.size, entry.mtime_ns) or (
        after.st_size,
        after.st_mtime_ns,
    ) != (st.st_size, st.st_mtime_ns)
    if not changed and entry.mtime_ns < started_ns - RACY_WINDOW_NS:
        cache.record_file(key, digest, size)
    blob = FileBlob(path=entry.rel, digest=digest, size=size, mode=mode)
    return PackedFile(file=blob, path=path, reused=False), changed


def pack(
    spec: PackSpec,
    cache_dir: Path | str,
    progress: ProgressCallback | None = None,
    prepared: Prepared | None = None,
) -> PackResult:
    """Pack the code (and venv) layer into ``cache_dir``, reusing layers whose stat walk is
    unchanged. Raises PackError (naming the field) before writing anything on bad input.
    ``prepared`` is a scan of the same spec made moments ago (a send's): the tree is then not
    walked again; files that changed since are caught by the writer's stat checks."""
    started = time.perf_counter()
    started_ns = time.time_ns() if prepared is None else prepared.scanned_ns
    if prepared is None or prepared.spec != spec:
        prepared = prepare(spec)
    plan = prepared.plan
    if plan.refused is not None:
        largest = max(plan.layers, key=lambda layer: layer.bytes)
        raise PackError(
            plan.refused,
            field=_FIELD[largest.role],
            hint="exclude large data (excludes, .j2cignore) or raise pack.hard_limit_mb",
        )
    cache = LayerCache(
        Path(cache_dir),
        max_bytes=spec.layer_cache_max_bytes,
        keep_sends=spec.layer_cache_keep_sends,
    )
    layers: list[PackedLayer] = []
    files: list[PackedFile] = []
    warnings = list(plan.warnings)
    for scanned in prepared.layers:
        big: list[Entry] = []
        if scanned.role == LayerRole.code:
            scanned, big = _split(scanned, spec.big_file_bytes)
        moved: list[str] = []
        for entry in big:
            packed_file, file_changed = _pack_file(scanned.root, entry, cache, started_ns)
            files.append(packed_file)
            if file_changed:
                moved.append(entry.rel)
        parts = [scanned]
        if scanned.role == LayerRole.code:
            parts = split_layer(scanned, spec.code_part_bytes)
        files_before = bytes_before = 0
        changed = moved
        for part in parts:
            report = progress
            if progress is not None and len(parts) > 1:
                report = _part_progress(progress, files_before, bytes_before, scanned)
            packed, part_changed = _pack_layer(part, spec, cache, started_ns, report)
            files_before += len(part.files)
            bytes_before += part.bytes
            changed = [*changed, *part_changed]
            layers.append(packed)
        if changed:
            shown = ", ".join(changed[:10]) + (" ..." if len(changed) > 10 else "")
            warnings.append(
                PackWarning(
                    code="changed_while_packing",
                    message=f"{scanned.role.value}: files changed while being packed (the "
                    f"archive holds their size at scan time): {shown}",
                )
            )
    cache.remember_send(prepared.code_root, [p.path for p in layers] + [f.path for f in files])
    return PackResult(
        layers=layers,
        files=files,
        entry=plan.entry,
        venv=plan.venv,
        warnings=warnings,
        excluded=plan.excluded,
        seconds=time.perf_counter() - started,
    )
