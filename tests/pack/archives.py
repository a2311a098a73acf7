"""Read back what the packer wrote, with the standard library's tarfile (an independent reader)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import zstandard


def open_layer(blob: Path) -> tarfile.TarFile:
    data = zstandard.ZstdDecompressor().stream_reader(blob.open("rb")).read()
    return tarfile.open(fileobj=io.BytesIO(data), mode="r:")


def names(blob: Path) -> list[str]:
    with open_layer(blob) as archive:
        return archive.getnames()


def members(blob: Path) -> dict[str, tarfile.TarInfo]:
    with open_layer(blob) as archive:
        return {member.name: member for member in archive.getmembers()}


def read(blob: Path, name: str) -> bytes:
    with open_layer(blob) as archive:
        handle = archive.extractfile(name)
        assert handle is not None
        return handle.read()
