"""Uploading the job's outputs folder (``$J2C_OUTPUT_DIR``) to a store prefix after the run,
and the outputs index next to them.

Every regular file under the folder goes to ``<output URI>/<relative path>``, whatever the job's
exit code (a failed run's partial outputs and executed notebook are what one needs to debug it).
Symbolic links are not followed: a link to a file outside the folder is not uploaded. The storage
package is imported here only, so a job without ``--output-uri`` never loads it.

Once the files are up, ``<output URI>/.j2c-outputs.json`` (:data:`INDEX_NAME`) says what is
there — each uploaded file's name, size and sha256 — and which files failed and why. It is
written last and also when some files failed, so the server's results stage can list the
outputs of any backend from the store alone (``j2c_server.jobs.results`` reads it). A file of the
job named like the index is not uploaded: that name is the index's.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from ..errors import J2CError
from ..units import byte_size
from .errors import OutputsNotUploaded
from .fetch import shown
from .log import Stage

CONCURRENT_UPLOADS = 4
INDEX_NAME = ".j2c-outputs.json"
INDEX_FORMAT = 1
_HASH_CHUNK = 1 << 20


def upload_outputs(output_dir: Path, output_uri: str) -> None:
    files = [path for path in _regular_files(output_dir) if path != output_dir / INDEX_NAME]
    size = sum(path.stat().st_size for path in files)
    stage = Stage(
        "uploading outputs", f"{len(files)} files, {byte_size(size)} to {shown(output_uri)}"
    )
    try:
        failed = asyncio.run(_upload(output_dir, files, output_uri))
    except J2CError as exc:
        raise OutputsNotUploaded(
            f"uploading {output_dir} to {shown(output_uri)} failed: {exc.message}", hint=exc.hint
        ) from None
    except OSError as exc:
        raise OutputsNotUploaded(
            f"uploading {output_dir} to {shown(output_uri)} failed: "
            f"{exc.filename}: {exc.strerror or exc}"
        ) from None
    if failed:
        first = failed[0]
        raise OutputsNotUploaded(
            f"{len(failed)} of {len(files)} outputs not uploaded to {shown(output_uri)}; "
            f"{first['name']}: {first['error']}"
        )
    stage.done(f"{len(files)} files uploaded")


def _regular_files(folder: Path) -> list[Path]:
    found = []
    for root, _dirs, names in os.walk(folder):  # does not descend into linked folders
        for name in names:
            path = Path(root, name)
            if path.is_file() and not path.is_symlink():
                found.append(path)
    return sorted(found)


def _size_and_sha256(path: Path) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as handle:
        while chunk := handle.read(_HASH_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def _failure(exc: BaseException) -> str:
    if isinstance(exc, J2CError):
        return exc.message
    if isinstance(exc, OSError):
        return f"{exc.strerror or exc}"
    return str(exc) or type(exc).__name__


async def _upload(folder: Path, files: list[Path], output_uri: str) -> list[dict[str, str]]:
    """Upload every file (one failure does not stop the others), then the index; the failed
    files (name, why) are returned. A store that cannot take the index raises."""
    from ..storage import open_store
    from ..storage.download import settings_from_env

    store = open_store(output_uri, settings_from_env())
    limit = asyncio.Semaphore(CONCURRENT_UPLOADS)
    uploaded: list[dict[str, Any]] = []
    failed: list[dict[str, str]] = []

    async def one(path: Path) -> None:
        name = path.relative_to(folder).as_posix()
        async with limit:
            try:
                size, sha256 = await asyncio.to_thread(_size_and_sha256, path)
                await store.put_file(name, path)
            except (J2CError, OSError) as exc:
                failed.append({"name": name, "error": _failure(exc)})
                return
        uploaded.append({"name": name, "size": size, "sha256": sha256})

    try:
        await asyncio.gather(*(one(path) for path in files))
        failed.sort(key=lambda item: item["name"])
        index = {
            "format": INDEX_FORMAT,
            "files": sorted(uploaded, key=lambda item: str(item["name"])),
            "failed": failed,
        }
        await store.put_bytes(INDEX_NAME, json.dumps(index, indent=1).encode() + b"\n")
    finally:
        await store.close()
    return failed
