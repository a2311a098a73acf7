"""Which check a multipart part gets: the server's CRC32 when it answers it back, else the MD5 of
the bytes sent against the part's ETag (a fake S3 client, so the server's answers are chosen)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from j2c_server.storage.filerange import CorruptTransfer
from j2c_server.storage.multipart import MIB, MultipartUpload

PART = 5 * MIB


class Pages:
    async def paginate(self, **params: Any) -> AsyncIterator[dict[str, Any]]:
        yield {}


class FakeS3:
    """Stores nothing; answers every part with an ETag that is no MD5 of it (as a server that
    damaged it would), and with its CRC32 echoed when ``echo`` is set."""

    def __init__(self, *, echo: bool) -> None:
        self.echo = echo
        self.parts: list[int] = []
        self.completed = False

    def get_paginator(self, operation: str) -> Pages:
        return Pages()

    async def create_multipart_upload(self, **params: Any) -> dict[str, Any]:
        return {"UploadId": "u1"}

    async def upload_part(self, *, Body: Any, PartNumber: int, **params: Any) -> dict[str, Any]:
        while Body.read(256 * 1024):
            pass
        self.parts.append(PartNumber)
        echoed = {"ChecksumCRC32": params["ChecksumCRC32"]} if self.echo else {}
        return {"ETag": '"00000000000000000000000000000000"', **echoed}

    async def complete_multipart_upload(self, **params: Any) -> dict[str, Any]:
        self.completed = True
        return {}


def upload(s3: FakeS3, tmp_path: Path) -> MultipartUpload:
    """Four parts of random bytes, two at a time."""
    path = tmp_path / "layer"
    path.write_bytes(os.urandom(3 * PART + 17))
    size = path.stat().st_size
    return MultipartUpload(s3, "bucket", "key", path, size, PART, concurrency=2, attempts=1)


async def test_a_server_that_answers_the_crc32_back_is_not_second_guessed_by_md5(
    tmp_path: Path,
) -> None:
    s3 = FakeS3(echo=True)
    assert await upload(s3, tmp_path).run() == 3 * PART + 17
    assert sorted(s3.parts) == [1, 2, 3, 4]
    assert s3.completed


async def test_a_server_that_answers_nothing_back_has_every_part_checked_by_its_md5(
    tmp_path: Path,
) -> None:
    s3 = FakeS3(echo=False)
    with pytest.raises(CorruptTransfer):
        await upload(s3, tmp_path).run()
    assert not s3.completed


class HonestS3(FakeS3):
    """Answers each part with the MD5 of the bytes it received (as moto does, with no CRC32
    back), except the parts in ``damaged``, whose ETag is no MD5 of them."""

    def __init__(self, damaged: set[int]) -> None:
        super().__init__(echo=False)
        self.damaged = damaged

    async def upload_part(self, *, Body: Any, PartNumber: int, **params: Any) -> dict[str, Any]:
        digest = hashlib.md5(usedforsecurity=False)
        while block := Body.read(256 * 1024):
            digest.update(block)
        self.parts.append(PartNumber)
        etag = "0" * 32 if PartNumber in self.damaged else digest.hexdigest()
        return {"ETag": f'"{etag}"'}


async def test_once_the_server_is_known_to_answer_no_crc32_later_parts_are_md5_checked_too(
    tmp_path: Path,
) -> None:
    # One part at a time: part 1's answer tells there is no CRC32 back; parts 2-4 are hashed as
    # they are sent, and the damaged one is found by its ETag.
    path = tmp_path / "layer"
    path.write_bytes(os.urandom(3 * PART + 17))
    s3 = HonestS3(damaged=set())
    upload = MultipartUpload(s3, "b", "k", path, path.stat().st_size, PART, 1, attempts=1)
    assert await upload.run() == 3 * PART + 17
    assert s3.completed

    damaged = HonestS3(damaged={3})
    upload = MultipartUpload(damaged, "b", "k", path, path.stat().st_size, PART, 1, attempts=1)
    with pytest.raises(CorruptTransfer, match="not the MD5"):
        await upload.run()
    assert damaged.parts == [1, 2, 3]
    assert not damaged.completed
