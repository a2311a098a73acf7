"""Big files of the code layer (``Manifest.files``): each its own blob, verified, then placed.

The packer ships files of ``pack.big_file_mb`` and up outside the code layer, so that an edit
elsewhere does not send them again. Here, after the code layer is extracted (or materialised from
the node's cache), each one is downloaded beside the layers (``<workdir>/blobs/<hex>.file``,
through ``.part`` while its sha256 is computed, renamed only once it matches), then put at its
path inside the code folder with its mode.

Placement follows the extraction's rules (extract.py): a path that is absolute, holds ``..``,
is too deep or too long is refused before anything is downloaded; the parent folders are walked
one by one with ``O_NOFOLLOW`` (created when missing), so a file is never written through a
symlink, and a path the code layer already holds is refused rather than overwritten. Refusals
are ``UnsafeEntry`` (exit code 68), naming the path.
"""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from j2c_server.core.manifest_plan import FilePlan
from j2c_server.unpack.downloads import download_files
from j2c_server.unpack.entry_names import relative_name
from j2c_server.unpack.errors import (
    LocalIOError,
    ManifestInvalid,
    UnsafeEntry,
)
from j2c_server.unpack.log import Stage, warn

if TYPE_CHECKING:
    from j2c_server.unpack.cache.node import Cache

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_CHUNK = 1024 * 1024


def check_files(files: list[FilePlan]) -> list[str]:
    """Each big file's path, normalised; UnsafeEntry for one that could land outside the code
    folder, names the folder itself, or is listed twice; ManifestInvalid for one digest listed
    with two sizes."""
    seen: set[str] = set()
    rels: list[str] = []
    sizes: dict[str, int] = {}
    for blob in files:
        if sizes.setdefault(blob.digest, blob.size) != blob.size:
            raise ManifestInvalid(
                f"big file {blob.path!r}: {blob.digest} is listed with two sizes",
                field="files.size",
            )
        try:
            rel = relative_name(blob.path, blob.path)
        except UnsafeEntry as exc:
            raise UnsafeEntry(f"big file: {exc.message}", field="files.path") from None
        if not rel or "\x00" in rel or "\\" in rel:
            raise UnsafeEntry(f"big file {blob.path!r} is not a file path", field="files.path")
        if rel in seen:
            raise UnsafeEntry(f"big file {rel!r} is listed twice", field="files.path")
        seen.add(rel)
        rels.append(rel)
    return rels


def place_files(
    manifest_uri: str,
    files: list[FilePlan],
    code_home: Path,
    blob_dir: Path,
    cache: Cache | None = None,
) -> int:
    """Download every big file (verified), then place it in ``code_home``; the bytes placed.
    With the node's ``cache``, the blobs come from it (downloaded into it once) and are copied,
    never moved nor linked: the job's copy is its own, and hashed as it is made (a cached blob
    is checked every time it is used, not only when it was downloaded)."""
    if not files:
        return 0
    rels = check_files(files)
    unique = list({blob.digest: blob for blob in files}.values())
    sources: dict[str, Path] | None = None
    fresh: set[str] = set()
    if cache is not None:
        from j2c_server.unpack.cache.blobs import file_blobs
        from j2c_server.unpack.cache.node import Bypass

        try:
            sources, fresh = file_blobs(cache, manifest_uri, unique)
        except Bypass as exc:
            warn("cache", f"not used for the big files: {exc}")
    movable = sources is None
    if sources is None:
        sources = download_files(manifest_uri, unique, blob_dir)
    placing = Stage("placing files")
    last_use = {blob.digest: index for index, blob in enumerate(files)}
    for index, (blob, rel) in enumerate(zip(files, rels, strict=True)):
        move = movable and last_use[blob.digest] == index
        # A blob from the cache that this job did not just download is hashed as it is copied.
        check = None if movable or blob.digest in fresh else blob.digest
        try:
            _place(code_home, rel, sources[blob.digest], blob.mode, move=move, check=check)
        except _Mismatch as exc:
            from j2c_server.unpack.cache.blobs import refetch_file

            assert cache is not None
            sources[blob.digest] = refetch_file(cache, manifest_uri, blob, str(exc))
            fresh.add(blob.digest)
            _place(code_home, rel, sources[blob.digest], blob.mode, move=False, check=None)
    placing.done(f"{len(files)} big files into {code_home}")
    return sum(blob.size for blob in files)


class _Mismatch(Exception):
    """A cached blob's copy did not hash to its digest (the copy was removed)."""


def _place(root: Path, rel: str, source: Path, mode: int, *, move: bool, check: str | None) -> None:
    """``source`` at ``root/rel`` with ``mode``, never through a symlink nor over an entry;
    with ``check`` (a digest), the copy is hashed and removed (``_Mismatch``) unless it is
    that digest."""
    parts = rel.split("/")
    try:
        fd = os.open(root, _DIR_FLAGS)
    except OSError as exc:
        raise LocalIOError(f"cannot open the code folder {root}: {exc.strerror}") from None
    try:
        for depth, part in enumerate(parts[:-1]):
            try:
                os.mkdir(part, 0o755, dir_fd=fd)
            except FileExistsError:
                pass
            except OSError as exc:
                raise LocalIOError(f"cannot create a folder for {rel}: {exc.strerror}") from None
            try:
                below = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise LocalIOError(f"cannot open a folder of {rel}: {exc.strerror}") from None
                through = "/".join(parts[: depth + 1])
                raise UnsafeEntry(
                    f"big file {rel!r} would be written through {through!r}, which is not a "
                    "folder (a symlink or a file of the code layer)",
                    field="files.path",
                ) from None
            os.close(fd)
            fd = below
        name = parts[-1]
        try:
            os.lstat(name, dir_fd=fd)
        except FileNotFoundError:
            pass
        else:
            raise UnsafeEntry(
                f"big file {rel!r} collides with an entry of the code layer", field="files.path"
            )
        try:
            if move:
                os.chmod(source, mode)  # before the rename: never a chmod through a path
                try:
                    os.rename(source, name, dst_dir_fd=fd)
                    return
                except OSError as exc:
                    if exc.errno != errno.EXDEV:
                        raise
            _copy_into(source, name, fd, mode, check)
        except OSError as exc:
            raise LocalIOError(
                f"cannot place the big file {rel} in {root}: {exc.strerror or exc}"
            ) from None
    finally:
        os.close(fd)


def _copy_into(source: Path, name: str, dir_fd: int, mode: int, check: str | None) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    out = os.open(name, flags, 0o600, dir_fd=dir_fd)
    digest = hashlib.sha256()
    with os.fdopen(out, "wb") as handle, open(source, "rb") as src:
        while chunk := src.read(_CHUNK):
            if check is not None:
                digest.update(chunk)
            handle.write(chunk)
        os.fchmod(handle.fileno(), mode)
    if check is not None and "sha256:" + digest.hexdigest() != check:
        os.unlink(name, dir_fd=dir_fd)
        raise _Mismatch(f"it does not hash to {check}")
