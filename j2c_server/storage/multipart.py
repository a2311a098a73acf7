"""Resumable, concurrent S3 multipart upload of one local file, with bounded memory.

An interrupted upload is not aborted: the next run finds it (``list_multipart_uploads``), asks
which parts the server already holds (``list_parts``) and sends only the rest. A stored part is
reused only when its size and ETag (the MD5 of its bytes) match the local part, so a file that
changed since cannot be stitched into a corrupt object. Each part streams from disk as the HTTP
client reads it (memory stays a few chunks per concurrent part, whatever the part size), and the
ETag the server returns must be the MD5 of the bytes sent, or the part is sent again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .base import ProgressFn
from .filerange import FileRange, check_etag, range_md5
from .retry import client_error_status, retrying

log = logging.getLogger("j2c.storage")

MAX_PARTS = 10_000  # S3's limit per upload
MIB = 1024 * 1024


class UploadVanished(Exception):
    """The multipart upload was completed or aborted by someone else while we used it."""


@dataclass(frozen=True)
class Part:
    number: int
    offset: int
    size: int


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
    _etags: dict[int, str] = field(default_factory=dict, init=False)

    async def run(self) -> int:
        parts = plan_parts(self.size, self.part_size)
        upload_id, stored = await self._find_resumable()
        if upload_id is None:
            created = await self._call("create_multipart_upload")
            upload_id = str(created["UploadId"])
        else:
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
        listing = [{"PartNumber": p.number, "ETag": self._etags[p.number]} for p in parts]
        await self._call(
            "complete_multipart_upload", UploadId=upload_id, MultipartUpload={"Parts": listing}
        )
        return self.sent

    async def _send_parts(
        self, queue: Iterator[Part], upload_id: str, stored: dict[int, tuple[str, int]]
    ) -> None:
        # Workers share one iterator: each takes the next part only when it is free, so at
        # most ``concurrency`` parts are in flight.
        for part in queue:
            if await self._already_stored(part, stored.get(part.number)):
                continue
            self._etags[part.number] = await self._call(
                "upload_part", body=part, UploadId=upload_id, PartNumber=part.number
            )
            self.sent += part.size
            if self.progress is not None:
                self.progress(part.size)

    async def _already_stored(self, part: Part, stored: tuple[str, int] | None) -> bool:
        """True when the server holds this part with the same size and MD5 (its ETag)."""
        if stored is None or stored[1] != part.size:
            return False
        digest = await asyncio.to_thread(range_md5, self.path, part.offset, part.size)
        if stored[0] != digest.hex():
            return False
        self._etags[part.number] = f'"{stored[0]}"'
        return True

    async def _find_resumable(self) -> tuple[str | None, dict[int, tuple[str, int]]]:
        """The newest unfinished upload of this key and its stored parts, if there is one."""
        try:
            return await retrying(
                self._list_resumable,
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
                return None, {}
            raise

    async def _list_resumable(self) -> tuple[str | None, dict[int, tuple[str, int]]]:
        uploads = [
            upload
            async for page in self._pages("list_multipart_uploads", Prefix=self.key)
            for upload in page.get("Uploads", [])
            if upload["Key"] == self.key
        ]
        if not uploads:
            return None, {}
        upload_id = str(max(uploads, key=lambda upload: upload["Initiated"])["UploadId"])
        stored = {
            int(part["PartNumber"]): (str(part["ETag"]).strip('"').lower(), int(part["Size"]))
            async for page in self._pages("list_parts", Key=self.key, UploadId=upload_id)
            for part in page.get("Parts", [])
        }
        return upload_id, stored

    async def _pages(self, operation: str, **params: Any) -> Any:
        paginator = self.s3.get_paginator(operation)
        async for page in paginator.paginate(Bucket=self.bucket, **params):
            yield page

    async def _call(self, operation: str, *, body: Part | None = None, **params: Any) -> Any:
        """One request, retried; with ``body``, that part of the file is sent and its ETag
        (checked against the MD5 of what was sent) is returned instead of the response."""
        method = getattr(self.s3, operation)
        what = f"{operation} s3://{self.bucket}/{self.key}"

        async def attempt() -> Any:
            if body is None:
                return await method(Bucket=self.bucket, Key=self.key, **params)
            with FileRange(self.path, body.offset, body.size) as stream:
                response = await method(Bucket=self.bucket, Key=self.key, Body=stream, **params)
                return check_etag(response, stream, what)

        try:
            return await retrying(attempt, attempts=self.attempts, what=what)
        except Exception as exc:
            if client_error_status(exc)[1] == "NoSuchUpload":
                raise UploadVanished(what) from exc
            raise
