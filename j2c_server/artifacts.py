"""A finished job's artifacts as the server hands them out: one found by its recorded name and
read in chunks off the event loop, or copied into the job's project folder.

Only a name the job's results list is ever served, and its bytes come from the job's outputs
location (``results.output_uri``): for ``file://`` straight from that folder (a name or symlink
leading out of it is refused), for ``s3://`` downloaded through the store into a temporary file
first. Copies land in ``<project>/j2c-outputs/<job id>/<name>``, inside the server's root; that
folder holds a ``.gitignore`` of ``*``, so copies are neither committed nor packed with the
project again.
"""

from __future__ import annotations

import asyncio
import contextlib
import filecmp
import mimetypes
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from .config import StorageSettings
from .errors import Conflict, Forbidden, InvalidInput, NotFound
from .models import JobRecord
from .paths import confine, root_folder
from .storage import ObjectNotFound, open_store
from .storage.base import is_plain_relative_path
from .storage.urls import file_url_path, url_scheme

CHUNK_BYTES = 1 << 20
COPY_FOLDER = "j2c-outputs"
COPY_IGNORE = "*\n"


@dataclass(frozen=True)
class ArtifactFile:
    """One artifact, readable at ``path`` while its :func:`open_artifact` context lasts."""

    name: str
    path: Path
    size: int

    @property
    def filename(self) -> str:
        return self.name.rsplit("/", 1)[-1]

    @property
    def media_type(self) -> str:
        return mimetypes.guess_type(self.filename)[0] or "application/octet-stream"

    async def chunks(self) -> AsyncIterator[bytes]:
        """The bytes, ``CHUNK_BYTES`` at a time, each read in a worker thread."""
        handle = await asyncio.to_thread(self.path.open, "rb")
        try:
            while chunk := await asyncio.to_thread(handle.read, CHUNK_BYTES):
                yield chunk
        finally:
            handle.close()


def check_name(name: str) -> str:
    """Refuse a name no artifact can have: absolute, ``..``, empty segments, backslashes."""
    if not is_plain_relative_path(name):
        raise InvalidInput(
            f"name: {name!r} is not an artifact name (relative, '/'-separated, no '..')",
            field="name",
        )
    return name


def recorded_outputs(record: JobRecord, name: str) -> str:
    """The job's outputs location, once ``name`` is checked to be one of its artifacts."""
    check_name(name)
    results = record.results
    if not record.status.terminal:  # results may already hold its MLflow run, not its outputs
        raise Conflict(f"job {record.id} has not finished; its artifacts come at the end")
    if results is None:
        raise NotFound(f"job {record.id} recorded no results")
    if all(artifact.name != name for artifact in results.artifacts):
        raise NotFound(f"name: job {record.id} has no artifact {name!r}", field="name")
    if results.output_uri is None:
        raise NotFound(f"job {record.id} recorded no outputs location")
    return results.output_uri


@contextlib.asynccontextmanager
async def open_artifact(
    record: JobRecord, name: str, storage: StorageSettings
) -> AsyncIterator[ArtifactFile]:
    """The artifact ``name`` of the job as a local file (a temporary one for ``s3://``)."""
    output_uri = recorded_outputs(record, name)
    if url_scheme(output_uri) == "file":
        folder = file_url_path(output_uri, field="output_uri")
        path = await asyncio.to_thread(_local_file, folder, name)
        yield ArtifactFile(name, path, await asyncio.to_thread(os.path.getsize, path))
        return
    temp = await asyncio.to_thread(tempfile.mkdtemp, prefix="j2c-artifact-")
    try:
        path = Path(temp, "artifact")
        store = open_store(output_uri, storage)
        try:
            await store.get_file(name, path)
        except ObjectNotFound:
            raise NotFound(
                f"name: {name!r} is no longer in the job's outputs", field="name"
            ) from None
        finally:
            await store.close()
        yield ArtifactFile(name, path, await asyncio.to_thread(os.path.getsize, path))
    finally:
        await asyncio.to_thread(shutil.rmtree, temp, ignore_errors=True)


def _local_file(folder: Path, name: str) -> Path:
    base = folder.resolve()
    path = (base / name).resolve()
    if not path.is_relative_to(base):
        raise Forbidden(f"name: {name!r} leads outside the job's outputs", field="name")
    if not path.is_file():
        raise NotFound(f"name: {name!r} is no longer in the job's outputs", field="name")
    return path


def copy_into_project(record: JobRecord, artifact: ArtifactFile, root_dir: str | None) -> str:
    """Copy ``artifact`` to ``<project>/j2c-outputs/<job id>/<name>`` (blocking; run it in a
    thread) and return that path relative to the root (absolute without a root). The same bytes
    already there are the copy; anything else there is never overwritten."""
    root = root_folder(root_dir)
    code = confine(Path(record.request.code_path), root, "code_path")
    if not code.is_dir():
        raise NotFound(
            f"code_path: the project folder {record.request.code_path!r} no longer exists",
            field="code_path",
        )
    outputs = code / COPY_FOLDER
    target = outputs / record.id / artifact.name
    confine(target.parent, root, "code_path")  # before writing: no symlinked folder leads out
    target.parent.mkdir(parents=True, exist_ok=True)
    folder = confine(target.parent, root, "code_path")
    ignore = outputs / ".gitignore"
    if not os.path.lexists(ignore):
        ignore.write_text(COPY_IGNORE)
    target = folder / target.name
    shown = target.relative_to(root).as_posix() if root is not None else str(target)
    if not _holds(target, artifact.path, shown):
        _copy_new(artifact.path, target, shown)
    return shown


def _holds(target: Path, source: Path, shown: str) -> bool:
    """Whether ``target`` already is a copy of ``source``; Conflict when it is anything else."""
    if not os.path.lexists(target):
        return False
    if target.is_symlink() or not target.is_file() or not filecmp.cmp(target, source, False):
        raise Conflict(f"name: {shown!r} exists with other content; not overwritten", field="name")
    return True


def _copy_new(source: Path, target: Path, shown: str) -> None:
    """Copy through a temporary file linked into place: a reader never sees half a file, and a
    file that appeared meanwhile (another copy of the same) is checked, never replaced."""
    handle, temp = tempfile.mkstemp(prefix=".j2c-copy-", dir=target.parent)
    os.close(handle)
    try:
        shutil.copyfile(source, temp)
        try:
            os.link(temp, target)
        except FileExistsError:
            _holds(target, source, shown)
    finally:
        os.unlink(temp)
