"""Is there room for the job? Checked after placing and before anything is downloaded.

Each layer needs its compressed size in ``<workdir>/blobs`` (unless a verified blob is already
there) and its ``unpacked_size`` (bytes of regular files, from the manifest) at its home. The
needs are summed per filesystem (``st_dev`` of the nearest existing folder) and compared with
what an unprivileged user may still write there (``statvfs``: ``f_bavail * f_frsize``). A job
that cannot fit stops at once with exit code 74, naming the folder, the need and the free space,
instead of failing half-way through the extraction. Folder entries and block rounding are not
counted: the check catches a disk that is too small, not one that is exactly full.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from j2c_server.core.manifest_plan import LayerPlan
from j2c_server.core.units import byte_size
from j2c_server.unpack.errors import DiskFull
from j2c_server.unpack.homes import Placement


@dataclass
class _Need:
    where: Path  # the first folder named for this filesystem
    free: int
    bytes: int = 0
    what: list[str] = field(default_factory=list)


def check_free_space(layers: list[LayerPlan], placement: Placement, blob_dir: Path) -> None:
    """Raise DiskFull when a filesystem cannot hold what this job will write to it."""
    needs: dict[int, _Need] = {}

    def add(folder: Path, size: int, what: str) -> None:
        if size <= 0:
            return
        existing = _nearest_existing(folder)
        st = os.stat(existing)
        need = needs.get(st.st_dev)
        if need is None:
            vfs = os.statvfs(existing)
            need = needs[st.st_dev] = _Need(folder, vfs.f_bavail * vfs.f_frsize)
        need.bytes += size
        need.what.append(f"{what} {byte_size(size)}")

    for layer in layers:
        blob = blob_dir / f"{layer.digest.removeprefix('sha256:')}.tar.zst"
        if not blob.exists():
            add(blob_dir, layer.size, f"{layer.role.value} blob")
        add(placement.homes[layer.role], layer.unpacked_size, f"{layer.role.value} files")
    for need in needs.values():
        if need.bytes > need.free:
            raise DiskFull(
                f"not enough free space for this job at {need.where}: it needs "
                f"{byte_size(need.bytes)} ({', '.join(need.what)}), {byte_size(need.free)} "
                "are free",
                field="workdir",
                hint="free some space, or choose a --workdir on a larger disk",
            )


def _nearest_existing(folder: Path) -> Path:
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder
