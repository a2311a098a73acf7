"""Uploading the job's outputs folder (``$J2C_OUTPUT_DIR``) to a store prefix after the run.

Every regular file under the folder goes to ``<output URI>/<relative path>``, whatever the job's
exit code (a failed run's partial outputs and executed notebook are what one needs to debug it).
Symbolic links are not followed: a link to a file outside the folder is not uploaded. The storage
package is imported here only, so a job without ``--output-uri`` never loads it.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from ..errors import J2CError
from ..units import byte_size
from .errors import OutputsNotUploaded
from .fetch import shown
from .log import Stage

CONCURRENT_UPLOADS = 4


def upload_outputs(output_dir: Path, output_uri: str) -> None:
    files = _regular_files(output_dir)
    size = sum(path.stat().st_size for path in files)
    stage = Stage(
        "uploading outputs", f"{len(files)} files, {byte_size(size)} to {shown(output_uri)}"
    )
    try:
        asyncio.run(_upload(output_dir, files, output_uri))
    except J2CError as exc:
        raise OutputsNotUploaded(
            f"uploading {output_dir} to {shown(output_uri)} failed: {exc.message}", hint=exc.hint
        ) from None
    except OSError as exc:
        raise OutputsNotUploaded(f"reading {exc.filename}: {exc.strerror or exc}") from None
    stage.done(f"{len(files)} files uploaded")


def _regular_files(folder: Path) -> list[Path]:
    found = []
    for root, _dirs, names in os.walk(folder):  # does not descend into linked folders
        for name in names:
            path = Path(root, name)
            if path.is_file() and not path.is_symlink():
                found.append(path)
    return sorted(found)


async def _upload(folder: Path, files: list[Path], output_uri: str) -> None:
    from ..storage import open_store
    from ..storage.download import settings_from_env

    store = open_store(output_uri, settings_from_env())
    limit = asyncio.Semaphore(CONCURRENT_UPLOADS)

    async def one(path: Path) -> None:
        async with limit:
            await store.put_file(path.relative_to(folder).as_posix(), path)

    try:
        await asyncio.gather(*(one(path) for path in files))
    finally:
        await store.close()
