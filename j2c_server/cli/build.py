"""``j2c build``: pack a project (and its venv) and publish the layers and manifest to a store.

Stages 1-3 of the pipeline without a scheduler: what a user or a CI script runs to get a
manifest URI for ``j2c-unpack``. The layer cache is shared with the server and ``j2c submit``
(``<data dir>/layers``), so a later submit reuses what ``build`` packed.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path

import click

from j2c_server.cli.options import absolute_path
from j2c_server.cli.output import print_json
from j2c_server.config import J2CSettings, load_settings
from j2c_server.core.errors import ConfigError
from j2c_server.jobs.paths import resolve_call_path
from j2c_server.pack import (
    PackProgress,
    PackResult,
    PackSpec,
    PublishResult,
    make_manifest,
    pack,
    publish,
)
from j2c_server.storage import open_store
from j2c_server.wire.manifest import Manifest


def layer_cache_dir(settings: J2CSettings) -> Path:
    return settings.data_path() / "layers"


def _progress_printer() -> Callable[[PackProgress], None] | None:
    """A progress callback drawing one line on a terminal's stderr, or None when piped."""
    if not sys.stderr.isatty():
        return None

    def show(progress: PackProgress) -> None:
        percent = 100 * progress.bytes_done / progress.bytes_total if progress.bytes_total else 100
        state = "reused" if progress.reused else f"{percent:3.0f}%"
        click.echo(
            f"\r{progress.role.value} layer: {state} "
            f"({progress.files_done}/{progress.files_total} files)",
            err=True,
            nl=progress.files_done == progress.files_total,
        )

    return show


async def _publish(
    url: str, settings: J2CSettings, result: PackResult, manifest: Manifest
) -> PublishResult:
    store = open_store(url, settings.storage)
    try:
        return await publish(store, result, manifest)
    finally:
        await store.close()


@click.command("build")
@click.option("--code-path", required=True, help="Project folder (the code layer).")
@click.option(
    "--call-path",
    required=True,
    help="Entry point: a .py script or .ipynb notebook in the project, or '-m package.module'.",
)
@click.option("--venv-path", default=None, help="Virtual environment to ship (the venv layer).")
@click.option("--store", "store_url", default=None, help="file:///... or s3://bucket/prefix.")
@click.option("--compression-level", type=click.IntRange(1, 22), default=None)
@click.option("--exclude", "excludes", multiple=True, help="Extra gitignore pattern (repeat).")
@click.option(
    "--include", "includes", multiple=True, help="Ship a path a default rule leaves out (repeat)."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def build(
    code_path: str,
    call_path: str,
    venv_path: str | None,
    store_url: str | None,
    compression_level: int | None,
    excludes: tuple[str, ...],
    includes: tuple[str, ...],
    as_json: bool,
) -> None:
    """Pack the project and its venv into layers, upload them, print the manifest URI."""
    started = time.perf_counter()
    settings = load_settings()
    cwd = Path.cwd()
    code = Path(absolute_path(code_path, cwd))
    spec = PackSpec.from_settings(
        settings.pack,
        code_path=str(code),
        call_path=resolve_call_path(call_path, code, cwd),
        venv_path=absolute_path(venv_path, cwd) if venv_path else None,
        excludes=list(excludes),
        includes=list(includes),
        compression_level=compression_level,
        source_image=settings.lab_image(),
        # As the pipeline's pack_spec(): j2c's own data never ships; secret verdicts are cached.
        never_pack=[settings.data_path()],
        secret_scan_cache=layer_cache_dir(settings),
    )
    cache = layer_cache_dir(settings)
    try:
        result = pack(spec, cache, progress=None if as_json else _progress_printer())
    except PermissionError as exc:
        raise ConfigError(
            f"cannot write the layer cache {cache}: {exc.strerror}", field="data_dir"
        ) from None
    manifest = make_manifest(result, source_image=spec.source_image)
    published = asyncio.run(
        _publish(store_url or settings.storage_url(), settings, result, manifest)
    )
    seconds = time.perf_counter() - started
    if as_json:
        print_json(
            {
                "manifest": published.manifest_uri,
                "seconds": round(seconds, 3),
                "layers": [
                    {
                        "role": packed.layer.role.value,
                        "digest": packed.layer.digest,
                        "bytes": packed.layer.size,
                        "files": packed.layer.files,
                        "reused": packed.reused,
                        "seconds": round(packed.seconds, 3),
                    }
                    for packed in result.layers
                ],
                "big_files": [
                    {**packed.file.model_dump(mode="json"), "reused": packed.reused}
                    for packed in result.files
                ],
                "warnings": [warning.model_dump(mode="json") for warning in result.warnings],
            }
        )
        return
    parts = len(result.code_parts())
    part = 0
    for packed in result.layers:
        layer = packed.layer
        how = "reused" if packed.reused else f"packed in {packed.seconds:.2f} s"
        name = f"{layer.role.value} layer"
        if layer.role.value == "code" and parts > 1:
            part += 1
            name += f" part {part} of {parts}"
        click.echo(
            f"{name}: {layer.files} entries, {layer.size / 1e6:.1f} MB, {how}"
            f" ({layer.digest[:19]})",
            err=True,
        )
    for packed_file in result.files:
        blob = packed_file.file
        how = "unchanged" if packed_file.reused else "copied"
        click.echo(f"big file {blob.path}: {blob.size / 1e6:.1f} MB, its own blob, {how}", err=True)
    for warning in result.warnings:
        click.echo(f"j2c: warning: {warning.message}", err=True)
    click.echo(
        f"uploaded {published.bytes_uploaded / 1e6:.1f} MB in {seconds:.2f} s total", err=True
    )
    click.echo(published.manifest_uri)
