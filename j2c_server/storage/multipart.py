"""Resumable, concurrent S3 multipart upload of one local file, with bounded memory.

An interrupted upload is not aborted: the next run finds it (``list_multipart_uploads``), asks
which parts the server already holds (``list_parts``) and sends only the rest. A stored part is
reused only when its size and ETag (the MD5 of its bytes) match the local part, so a file that
changed since cannot be stitched into a corrupt object. Each part streams from disk as the HTTP
client reads it (memory stays a few chunks per concurrent part, whatever the part size).

Integrity: each part carries a CRC32 computed beforehand in a worker thread (uploads are
created with ``ChecksumAlgorithm=CRC32``, as boto3 does; a server that refuses checksums gets
uploads without), and the ETag the server returns must be the MD5 of the bytes sent, or the part
is sent again. A server that verifies the CRC32 answers it back (``x-amz-checksum-crc32``; j2c
does not send ``x-amz-sdk-checksum-algorithm``, which makes some fakes echo unverified): a part
so answered is not MD5-hashed at all (the MD5 is most of an upload's CPU, 0.44 s per 256 MB).
Until a first answer tells, parts stream unhashed and one answered without the CRC32 is hashed
then (a second read of the range, from the page cache); after an answer without it (moto, older
S3-compatible servers), parts are hashed while they are sent.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from j2c_server.storage.base import ProgressFn
from j2c_server.storage.filerange import FileRange, check_etag, range_digests
from j2c_server.storage.retry import client_error_status, retrying

log = logging.getLogger("j2c.storage")

MAX_PARTS = 10_000  # S3's limit per upload
MIB = 1024 * 1024
CHECKSUM = "CRC32"
# What servers without flexible checksums answer to ChecksumAlgorithm.
_CHECKSUM_REFUSED = frozenset({"InvalidArgument", "InvalidRequest", "NotImplemented"})


@functools.cache
def _hashing() -> ThreadPoolExecutor:
    """Two threads for the MD5s hashed after a part's answer: apart from the loop's default
    executor, whose threads feed the parts still streaming (a wave of parts answered at once
    would otherwise hold every one of them)."""
    return ThreadPoolExecutor(max_workers=2, thread_name_prefix="j2c-md5")


class UploadVanished(Exception):
    """The multipart upload was completed or aborted by someone else while we used it."""


@dataclass(frozen=True)
class Part:
    number: int
    offset: int
    size: int


@dataclass(frozen=True)
class Unfinished:
    """An upload of the key that an earlier run left unfinished, and what the server holds."""

    upload_id: str
    checksum: str | None
    parts: dict[int, tuple[str, int]]  # part number -> (MD5 hex, size)


def plan_parts(size: int, part_size: int) -> list[Part]:
    """Split ``size`` bytes into parts; the same inputs always give the same plan (for resume)."""
    if size > part_size * MAX_PARTS:
        part_size = -(-size // (MAX_PARTS * MIB)) * MIB
    return [
        Part(number, offset, min(part_size, size - offset))
        for number, offset in enumerate(range(0, size, part_size), start=1)
    ]


@dataclass
class MultipartUpload:
    """One file going to ``bucket``/``key`` in parts; ``run`` returns the bytes actually sent."""

    s3: Any
    bucket: str
    key: str
    path: Path
    size: int
    part_size: int
    concurrency: int
    attempts: int
    progress: ProgressFn | None = None
    sent: int = field(default=0, init=False)
    _checksum: str | None = field(default=CHECKSUM, init=False)
    # Whether the server answers parts' CRC32 back (it verifies them): None until a part's
    # answer says. Parts sent before are hashed after their answer, if it has no CRC32.
    _echoes: bool | None = field(default=None, init=False)
    _streaming: set[FileRange] = field(default_factory=set, init=False)
    _done: dict[int, dict[str, Any]] = field(default_factory=dict, init=False)

    async def run(self) -> int:
        parts = plan_parts(self.size, self.part_size)
        unfinished = await self._find_unfinished()
        if unfinished is None:
            upload_id = await self._create()
            stored: dict[int, tuple[str, int]] = {}
        else:
            upload_id, stored, self._checksum = (
                unfinished.upload_id,
                unfinished.parts,
                unfinished.checksum,
            )
            log.info(
                "resuming upload of s3://%s/%s: the server holds %d of %d parts",
                self.bucket,
                self.key,
                len(stored),
                len(parts),
            )
        queue = iter(parts)
        workers = [
            asyncio.ensure_future(self._send_parts(queue, upload_id, stored))
            for _ in range(min(self.concurrency, len(parts)))
        ]
        try:
            await asyncio.gather(*workers)
        except BaseException:
            for worker in workers:
                worker.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            raise
        listing = [{"PartNumber": part.number, **self._done[part.number]} for part in parts]
        await self._call(
            "complete_multipart_upload", UploadId=upload_id, MultipartUpload={"Parts": listing}
        )
        return self.sent

    async def _create(self) -> str:
        try:
            created = await self._call("create_multipart_upload", ChecksumAlgorithm=CHECKSUM)
        except Exception as exc:
            if client_error_status(exc)[1] not in _CHECKSUM_REFUSED:
                raise
            log.info("s3://%s refuses checksums; uploading without", self.bucket)
            self._checksum = None
            created = await self._call("create_multipart_upload")
        return str(created["UploadId"])

    async def _send_parts(
        self, queue: Iterator[Part], upload_id: str, stored: dict[int, tuple[str, int]]
    ) -> None:
        # Workers share one iterator: each takes the next part only when it is free, so at
        # most ``concurrency`` parts are in flight.
        for part in queue:
            held = stored.get(part.number)
            md5, crc32 = await asyncio.to_thread(
                range_digests, self.path, part.offset, part.size, md5=held is not None
            )
            checksum = {f"Checksum{self._checksum}": crc32} if self._checksum else {}
            if md5 is not None and held == (md5.hex(), part.size):
                self._done[part.number] = {"ETag": f'"{md5.hex()}"', **checksum}
                continue
            etag = await self._call(
                "upload_part",
                body=part,
                checksum=checksum,
                UploadId=upload_id,
                PartNumber=part.number,
            )
            self._done[part.number] = {"ETag": etag, **checksum}
            self.sent += part.size
            if self.progress is not None:
                self.progress(part.size)

    def _learn(self, echoed: bool) -> None:
        """What a part's answer says of the server: once it answered a CRC32 back, parts still
        streaming and those to come are not MD5-hashed; once it did not, those to come are
        hashed while they are sent."""
        if echoed and self._echoes is not True:
            self._echoes = True
            log.debug("s3://%s verifies part checksums; parts are not MD5-hashed", self.bucket)
            for stream in self._streaming:
                stream.stop_md5()
        elif not echoed and self._echoes is None:
            self._echoes = False

    async def _find_unfinished(self) -> Unfinished | None:
        """The newest unfinished upload of this key that can be continued, if there is one."""
        try:
            return await retrying(
                self._list_unfinished,
                attempts=self.attempts,
                what=f"listing unfinished uploads of s3://{self.bucket}/{self.key}",
            )
        except Exception as exc:
            status, code = client_error_status(exc)
            # Listing needs permissions a writer may lack; without them, start afresh.
            if status in (403, 404) or code in ("AccessDenied", "NoSuchUpload"):
                log.info(
                    "cannot resume s3://%s/%s (%s): starting afresh", self.bucket, self.key, code
                )
                return None
            raise

    async def _list_unfinished(self) -> Unfinished | None:
        uploads = [
            upload
            async for page in self._pages("list_multipart_uploads", Prefix=self.key)
            for upload in page.get("Uploads", [])
            # Only CRC32 (ours) or no checksum: parts of another algorithm cannot be continued.
            if upload["Key"] == self.key and upload.get("ChecksumAlgorithm") in (None, CHECKSUM)
        ]
        if not uploads:
            return None
        newest = max(uploads, key=lambda upload: upload["Initiated"])
        upload_id = str(newest["UploadId"])
        parts = {
            int(part["PartNumber"]): (str(part["ETag"]).strip('"').lower(), int(part["Size"]))
            async for page in self._pages("list_parts", Key=self.key, UploadId=upload_id)
            for part in page.get("Parts", [])
        }
        return Unfinished(upload_id, newest.get("ChecksumAlgorithm"), parts)

    async def _pages(self, operation: str, **params: Any) -> Any:
        paginator = self.s3.get_paginator(operation)
        async for page in paginator.paginate(Bucket=self.bucket, **params):
            yield page

    async def _call(
        self,
        operation: str,
        *,
        body: Part | None = None,
        checksum: dict[str, str] | None = None,
        **params: Any,
    ) -> Any:
        """One request, retried; with ``body``, that part of the file is sent (with its
        ``checksum`` headers) and its ETag is returned instead of the response, once checked
        against the MD5 of what was sent unless the server verified the checksum itself."""
        method = getattr(self.s3, operation)
        what = f"{operation} s3://{self.bucket}/{self.key}"
        checksum = checksum or {}

        async def attempt() -> Any:
            if body is None:
                return await method(Bucket=self.bucket, Key=self.key, **params)
            hashed = not checksum or self._echoes is False
            with FileRange(self.path, body.offset, body.size, md5=hashed) as stream:
                self._streaming.add(stream)
                try:
                    response = await method(
                        Bucket=self.bucket, Key=self.key, Body=stream, **checksum, **params
                    )
                finally:
                    self._streaming.discard(stream)
                digest = stream.md5()
            echoed = bool(checksum) and all(
                response.get(name) == value for name, value in checksum.items()
            )
            if checksum:
                self._learn(echoed)
            if echoed:
                return str(response["ETag"])  # the server verified the bytes it received
            if digest is None:  # not hashed while sent: the server's answer came first
                hash_range = functools.partial(
                    range_digests, self.path, body.offset, body.size, md5=True, crc32=False
                )
                loop = asyncio.get_running_loop()
                digest, _ = await loop.run_in_executor(_hashing(), hash_range)
            return check_etag(response, digest, what)

        try:
            return await retrying(attempt, attempts=self.attempts, what=what)
        except Exception as exc:
            if client_error_status(exc)[1] == "NoSuchUpload":
                raise UploadVanished(what) from exc
            raise
