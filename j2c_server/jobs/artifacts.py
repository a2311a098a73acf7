"""A finished job's artifacts as the server hands them out: one found by its recorded name and
read in chunks off the event loop, or copied into the job's project folder.

Only a name the job's results list is ever served, and its bytes come from the job's outputs
location (``results.output_uri``): for ``file://`` straight from that folder (a name or symlink
leading out of it is refused), for ``s3://`` downloaded through the store into a temporary file
first. An artifact with a sha256 (from the job's outputs index, itself checked against the
digest in the job's log: jobs/results.py) is verified before anything is served or copied, and
again on the bytes actually sent or written: a file replaced in the store is refused with the
two digests named (a download already under way is cut short, a copy is never linked into
place). Copies land in ``<project>/j2c-outputs/<job id>/<name>``, inside the server's root; that
folder holds a ``.gitignore`` of ``*``, so copies are neither committed nor packed with the
project again. "Copy all" (:func:`copy_all_into_project`) copies every listed artifact the same
way, one at a time, and names each one it could not copy with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import filecmp
import hashlib
import mimetypes
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from j2c_server.config import StorageSettings
from j2c_server.core.errors import (
    Conflict,
    Forbidden,
    IntegrityError,
    InvalidInput,
    J2CError,
    NotFound,
)
from j2c_server.jobs.paths import confine, root_folder
from j2c_server.storage import ObjectNotFound, open_store
from j2c_server.storage.base import is_plain_relative_path
from j2c_server.storage.urls import file_url_path, url_scheme
from j2c_server.wire.api import Artifact, ArtifactsCopy, JobRecord, OutputFailure

CHUNK_BYTES = 1 << 20
COPY_FOLDER = "j2c-outputs"
COPY_IGNORE = "*\n"


@dataclass(frozen=True)
class ArtifactFile:
    """One artifact, readable at ``path`` while its :func:`open_artifact` context lasts."""

    name: str
    path: Path
    size: int
    sha256: str | None = None  # what the outputs index recorded; None: nothing to check

    @property
    def filename(self) -> str:
        return self.name.rsplit("/", 1)[-1]

    @property
    def media_type(self) -> str:
        return mimetypes.guess_type(self.filename)[0] or "application/octet-stream"

    async def chunks(self) -> AsyncIterator[bytes]:
        """The bytes, ``CHUNK_BYTES`` at a time, each read in a worker thread."""
        handle = await asyncio.to_thread(self.path.open, "rb")
        digest = hashlib.sha256()
        try:
            while chunk := await asyncio.to_thread(handle.read, CHUNK_BYTES):
                digest.update(chunk)
                yield chunk
        finally:
            handle.close()
        self.check(digest.hexdigest())

    def check(self, actual: str) -> None:
        """Refuse bytes whose sha256 is not the recorded one."""
        if self.sha256 is not None and actual != self.sha256:
            raise IntegrityError(
                f"name: {self.name!r} is not the file the job wrote: its sha256 is "
                f"{actual}, the job's outputs index recorded {self.sha256}; not served",
                field="name",
                hint="the job's outputs were changed in the store after it ended",
            )

    def verify(self) -> None:
        """Hash the file now (blocking: run it in a thread) and refuse a mismatch."""
        if self.sha256 is not None:
            self.check(_sha256_of(self.path))


def check_name(name: str) -> str:
    """Refuse a name no artifact can have: absolute, ``..``, empty segments, backslashes."""
    if not is_plain_relative_path(name):
        raise InvalidInput(
            f"name: {name!r} is not an artifact name (relative, '/'-separated, no '..')",
            field="name",
        )
    return name


def recorded_outputs(record: JobRecord, name: str) -> tuple[str, Artifact]:
    """The job's outputs location and the artifact, once ``name`` is checked to be one."""
    check_name(name)
    results = record.results
    if not record.status.terminal:  # results may already hold its MLflow run, not its outputs
        raise Conflict(f"job {record.id} has not finished; its artifacts come at the end")
    if results is None:
        raise NotFound(f"job {record.id} recorded no results")
    artifact = next((one for one in results.artifacts if one.name == name), None)
    if artifact is None:
        raise NotFound(f"name: job {record.id} has no artifact {name!r}", field="name")
    if results.output_uri is None:
        raise NotFound(f"job {record.id} recorded no outputs location")
    return results.output_uri, artifact


@contextlib.asynccontextmanager
async def open_artifact(
    record: JobRecord, name: str, storage: StorageSettings
) -> AsyncIterator[ArtifactFile]:
    """The artifact ``name`` of the job as a local file (a temporary one for ``s3://``)."""
    output_uri, recorded = recorded_outputs(record, name)
    if url_scheme(output_uri) == "file":
        folder = file_url_path(output_uri, field="output_uri")
        path = await asyncio.to_thread(_local_file, folder, name)
        size = await asyncio.to_thread(os.path.getsize, path)
        local = ArtifactFile(name, path, size, recorded.sha256)
        await asyncio.to_thread(local.verify)
        yield local
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
        size = await asyncio.to_thread(os.path.getsize, path)
        fetched = ArtifactFile(name, path, size, recorded.sha256)
        await asyncio.to_thread(fetched.verify)  # a private copy: what is checked is served
        yield fetched
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
        _copy_new(artifact, target, shown)
    return shown


async def copy_all_into_project(
    record: JobRecord, storage: StorageSettings, root_dir: str | None
) -> ArtifactsCopy:
    """Every artifact the job's results list, copied as :func:`copy_into_project` copies one.
    A file that cannot be copied (other content already there, changed in the store, gone) is
    named in ``failed`` with the error's own message and the others still go; a job that has
    not finished or has no results is refused as a whole (the single copy's errors)."""
    if not record.status.terminal:
        raise Conflict(f"job {record.id} has not finished; its artifacts come at the end")
    if record.results is None:
        raise NotFound(f"job {record.id} recorded no results")
    root = root_folder(root_dir)
    code = await asyncio.to_thread(Path(record.request.code_path).resolve)
    folder = code / COPY_FOLDER / record.id
    if root is not None and folder.is_relative_to(root):
        folder = folder.relative_to(root)
    done = ArtifactsCopy(folder=folder.as_posix())
    for listed in record.results.artifacts:
        try:
            async with open_artifact(record, listed.name, storage) as artifact:
                path = await asyncio.to_thread(copy_into_project, record, artifact, root_dir)
        except J2CError as exc:
            done.failed.append(OutputFailure(name=listed.name, error=exc.message))
            continue
        done.copied.append(path)
    return done


def copy_into(artifact: ArtifactFile, folder: Path) -> tuple[Path, bool]:
    """Copy ``artifact`` to ``folder/<name>`` (blocking), keeping its relative path: the path,
    and whether it was copied now (False: the same bytes were already there). Never through
    a symlinked folder out of ``folder``, never over other content (Conflict)."""
    base = folder.resolve()
    target = base / artifact.name
    confine(target.parent, base, "copy")
    target.parent.mkdir(parents=True, exist_ok=True)
    target = confine(target.parent, base, "copy") / target.name
    if _holds(target, artifact.path, str(target)):
        return target, False
    _copy_new(artifact, target, str(target))
    return target, True


def _holds(target: Path, source: Path, shown: str) -> bool:
    """Whether ``target`` already is a copy of ``source``; Conflict when it is anything else."""
    if not os.path.lexists(target):
        return False
    if target.is_symlink() or not target.is_file() or not filecmp.cmp(target, source, False):
        raise Conflict(f"name: {shown!r} exists with other content; not overwritten", field="name")
    return True


def _copy_new(artifact: ArtifactFile, target: Path, shown: str) -> None:
    """Copy through a temporary file linked into place: a reader never sees half a file, the
    copy's own bytes are verified before they appear, and a file that appeared meanwhile
    (another copy of the same) is checked, never replaced."""
    handle, temp = tempfile.mkstemp(prefix=".j2c-copy-", dir=target.parent)
    os.close(handle)
    try:
        shutil.copyfile(artifact.path, temp)
        if artifact.sha256 is not None:
            artifact.check(_sha256_of(Path(temp)))
        try:
            os.link(temp, target)
        except FileExistsError:
            _holds(target, artifact.path, shown)
    finally:
        os.unlink(temp)


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()
