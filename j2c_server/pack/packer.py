"""``pack``: validate and scan (see :mod:`.plan`), then write each changed layer into the cache.

Synchronous and CPU-bound by design: callers on an event loop run it with ``asyncio.to_thread``.
Nothing is written before validation passes; a failed write leaves no partial blob behind.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from ..errors import PackError
from ..models import Layer, LayerRole
from .fingerprint import CachedLayer, LayerCache, fingerprint, is_racy
from .models import PackedLayer, PackProgress, PackResult, PackSpec, PackWarning
from .plan import Prepared, prepare
from .scan import ScannedLayer
from .tarwriter import write_layer

ProgressCallback = Callable[[PackProgress], None]
_FIELD = {LayerRole.code: "code_path", LayerRole.venv: "venv_path"}


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
    cache = LayerCache(Path(cache_dir), max_bytes=spec.layer_cache_max_bytes)
    layers: list[PackedLayer] = []
    warnings = list(plan.warnings)
    for scanned in prepared.layers:
        packed, changed = _pack_layer(scanned, spec, cache, started_ns, progress)
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
    return PackResult(
        layers=layers,
        entry=plan.entry,
        venv=plan.venv,
        warnings=warnings,
        excluded=plan.excluded,
        seconds=time.perf_counter() - started,
    )
