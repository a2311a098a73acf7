"""The ``s3://bucket/prefix`` object store over aiobotocore (AWS S3, MinIO, Ceph RGW, ...).

Credentials come from the standard AWS chain (environment, ``storage.profile`` / ``AWS_PROFILE``,
web identity, container and instance roles); j2c never holds or logs them. The endpoint is
``storage.endpoint_url`` or, when unset, whatever the chain says (``AWS_ENDPOINT_URL``).

botocore's own retries are off: :mod:`.retry` retries every request, including the body of a
download, which resumes with a ranged GET pinned to the object's ETag. botocore computes no
checksums either (it would do so on the event loop, and its streaming checksum trailers are what
older S3-compatible servers reject): uploads are checked by their ETag (the MD5 of the bytes
sent, computed while streaming), multipart parts also carry a CRC32 header computed in a worker
thread (see :mod:`.multipart`), and downloads are checked against their sha256.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import importlib
import os
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from pathlib import Path
from typing import Any

from j2c_server.core.errors import InvalidInput, J2CError, StorageError
from j2c_server.storage.base import (
    Listing,
    ObjectStore,
    ProgressFn,
    StoredObject,
    check_key,
    is_content_addressed,
)
from j2c_server.storage.errors import map_s3_error
from j2c_server.storage.filerange import FileRange, check_etag
from j2c_server.storage.multipart import MIB, MultipartUpload, UploadVanished
from j2c_server.storage.post_upload import PostPolicy
from j2c_server.storage.redact import install_log_redaction, redact_url
from j2c_server.storage.retry import RetryableStatus, client_error_status, resuming, retrying
from j2c_server.storage.settings import StorageSettings
from j2c_server.storage.sink import PartialFile, receive_chunks

READ_CHUNK = 1024 * 1024
MAX_PRESIGN_S = 7 * 24 * 3600  # SigV4's limit


class S3Store(ObjectStore):
    """An :class:`~j2c_server.storage.base.ObjectStore` over one bucket and key prefix."""

    def __init__(self, bucket: str, prefix: str, settings: StorageSettings) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.settings = settings
        self._client: Any = None
        self._exit: AsyncExitStack | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock: asyncio.Lock | None = None

    @property
    def kind(self) -> str:
        return "s3"

    @property
    def endpoint(self) -> str:
        """Where requests go, for messages (never with credentials in it)."""
        url = (
            self.settings.endpoint_url
            or os.environ.get("AWS_ENDPOINT_URL_S3")
            or os.environ.get("AWS_ENDPOINT_URL")
        )
        return redact_url(url) if url else "AWS S3"

    @property
    def part_size(self) -> int:
        return self.settings.part_size_mb * MIB

    def _key(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{self._key(key)}"

    # ------------------------------------------------------------------ client

    async def _s3(self) -> Any:
        """The client of the running event loop, created on first use."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            # aiohttp sessions belong to one loop; a store reused under a new loop (one
            # asyncio.run per CLI command) gets a fresh client.
            self._loop, self._lock, self._client, self._exit = loop, asyncio.Lock(), None, None
        assert self._lock is not None
        async with self._lock:
            if self._client is None:
                self._client, self._exit = await self._open_client()
        return self._client

    async def _open_client(self) -> tuple[Any, AsyncExitStack]:
        # Importing aiobotocore takes ~0.4 s: not on the event loop of a Jupyter server.
        await asyncio.to_thread(importlib.import_module, "aiobotocore.session")
        from aiobotocore.config import AioConfig
        from aiobotocore.session import AioSession

        install_log_redaction()
        settings = self.settings
        config = AioConfig(
            region_name=settings.region,
            signature_version="s3v4",
            # j2c hashes bodies itself, off the event loop (see the module docstring); botocore
            # would otherwise hash every body on the loop over plain http (MinIO, moto).
            s3={"addressing_style": settings.addressing_style, "payload_signing_enabled": False},
            connect_timeout=settings.connect_timeout_s,
            read_timeout=settings.read_timeout_s,
            retries={"total_max_attempts": 1},
            max_pool_connections=max(10, settings.concurrency + 2),
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            warm_up_loader_caches=True,  # botocore's JSON models load in a thread, not the loop
        )
        session = await asyncio.to_thread(AioSession, profile=settings.profile)
        stack = AsyncExitStack()
        client = await stack.enter_async_context(
            session.create_client("s3", endpoint_url=settings.endpoint_url, config=config)
        )
        return client, stack

    async def close(self) -> None:
        exit_stack, self._exit, self._client = self._exit, None, None
        if exit_stack is not None and self._loop is asyncio.get_running_loop():
            await exit_stack.aclose()

    @contextmanager
    def _mapped(self, what: str) -> Iterator[None]:
        try:
            yield
        except J2CError:
            raise
        except Exception as exc:
            raise map_s3_error(exc, what=what, bucket=self.bucket, endpoint=self.endpoint) from exc

    async def _retrying(self, operation: str, what: str, **params: Any) -> Any:
        s3 = await self._s3()
        method = getattr(s3, operation)
        return await retrying(
            lambda: method(Bucket=self.bucket, **params),
            attempts=self.settings.max_attempts,
            what=what,
        )

    # ------------------------------------------------------------------ queries

    async def size(self, key: str) -> int | None:
        full, what = self._key(key), f"checking {self.uri(key)}"
        with self._mapped(what):
            try:
                head = await self._retrying("head_object", what, Key=full)
            except Exception as exc:
                status, code = client_error_status(exc)
                if status == 404 or code in ("404", "NoSuchKey", "NotFound"):
                    return None
                if status in (301, 400, 403):
                    await self._diagnose(full, what)
                raise
            return int(head["ContentLength"])

    async def _diagnose(self, full: str, what: str) -> None:
        """A HEAD error has no body to tell why; a listing of the same key's prefix does."""
        await self._retrying("list_objects_v2", what, Prefix=full, MaxKeys=1)

    async def list(self, prefix: str = "") -> list[str]:
        base = f"{self.prefix}/" if self.prefix else ""
        what = f"listing s3://{self.bucket}/{base}{prefix}"

        async def collect() -> list[str]:
            s3 = await self._s3()
            paginator = s3.get_paginator("list_objects_v2")
            return [
                str(item["Key"])[len(base) :]
                async for page in paginator.paginate(Bucket=self.bucket, Prefix=base + prefix)
                for item in page.get("Contents", [])
            ]

        with self._mapped(what):
            keys = await retrying(collect, attempts=self.settings.max_attempts, what=what)
        return sorted(keys)

    async def list_objects(self, prefix: str = "") -> Listing:
        base = f"{self.prefix}/" if self.prefix else ""
        what = f"listing s3://{self.bucket}/{base}{prefix}"

        async def collect() -> Listing:
            s3 = await self._s3()
            paginator = s3.get_paginator("list_objects_v2")
            return [
                StoredObject(
                    str(item["Key"])[len(base) :],
                    int(item["Size"]),
                    item["LastModified"].timestamp(),
                )
                async for page in paginator.paginate(Bucket=self.bucket, Prefix=base + prefix)
                for item in page.get("Contents", [])
            ]

        with self._mapped(what):
            found = await retrying(collect, attempts=self.settings.max_attempts, what=what)
        return sorted(found, key=lambda item: item.key)

    async def presign(self, key: str, *, expires_s: int | None = None) -> str | None:
        expires = expires_s if expires_s is not None else self.settings.presign_expiry_s
        if not 1 <= expires <= MAX_PRESIGN_S:
            raise InvalidInput(
                f"presigned URLs can live 1 s to 7 days, not {expires} s",
                field="storage.presign_expiry_s",
            )
        with self._mapped(f"presigning {self.uri(key)}"):
            s3 = await self._s3()
            url = await s3.generate_presigned_url(
                "get_object",
                Params={"Bucket": self.bucket, "Key": self._key(key)},
                ExpiresIn=expires,
            )
        return str(url)

    async def presign_post(
        self, prefix: str, *, max_bytes: int, expires_s: int
    ) -> PostPolicy | None:
        """A signed upload form for keys starting with ``prefix`` (a ``starts-with`` condition
        on ``$key``), files of at most ``max_bytes``, for ``expires_s`` seconds."""
        if not 1 <= expires_s <= MAX_PRESIGN_S:
            raise InvalidInput(
                f"upload policies can live 1 s to 7 days, not {expires_s} s",
                field="storage.presign_expiry_s",
            )
        full = self._key(prefix.rstrip("/")) + "/"
        with self._mapped(f"signing an upload policy for {self.uri(prefix.rstrip('/'))}/"):
            s3 = await self._s3()
            post = await s3.generate_presigned_post(
                Bucket=self.bucket,
                Key=full + "${filename}",  # the form's key; the job sends its own
                Conditions=[
                    ["starts-with", "$key", full],
                    ["content-length-range", 0, max_bytes],
                ],
                ExpiresIn=expires_s,
            )
        expires_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + expires_s))
        fields = {str(name): str(value) for name, value in post["fields"].items()}
        return PostPolicy(str(post["url"]), full, fields, max_bytes, expires_at)

    # ------------------------------------------------------------------ writes

    async def _store_file(
        self, key: str, path: Path, size: int, progress: ProgressFn | None
    ) -> None:
        with self._mapped(f"uploading {path.name} to {self.uri(key)}"):
            if size <= self.part_size:
                await self._put_small_file(key, path, size)
                if progress is not None:
                    progress(size)
                return
            await self._put_multipart(key, path, size, progress)

    async def _put_small_file(self, key: str, path: Path, size: int) -> None:
        """One PUT, streamed from disk; the returned ETag must be the MD5 of what was sent."""
        s3 = await self._s3()
        what = f"PUT {self.uri(key)}"

        async def attempt() -> None:
            with FileRange(path, 0, size) as body:
                response = await s3.put_object(Bucket=self.bucket, Key=self._key(key), Body=body)
                check_etag(response, body.md5(), what)

        await retrying(attempt, attempts=self.settings.max_attempts, what=what)

    async def _put_multipart(
        self, key: str, path: Path, size: int, progress: ProgressFn | None
    ) -> None:
        settings = self.settings
        for attempt in (1, 2):
            upload = MultipartUpload(
                s3=await self._s3(),
                bucket=self.bucket,
                key=self._key(key),
                path=path,
                size=size,
                part_size=self.part_size,
                concurrency=settings.concurrency,
                attempts=settings.max_attempts,
                progress=progress,
            )
            try:
                await upload.run()
                return
            except UploadVanished:
                # Another writer completed (or aborted) the upload we were resuming.
                if is_content_addressed(key) and await self.size(key) == size:
                    return
                if attempt == 2:
                    raise StorageError(
                        f"uploading to {self.uri(key)}: the multipart upload was completed or "
                        "aborted by another writer twice",
                        hint="another process is writing the same key; run again when it is done",
                    ) from None

    async def put_bytes(self, key: str, data: bytes) -> None:
        what = f"uploading to {self.uri(key)}"
        with self._mapped(what):
            digest = await asyncio.to_thread(
                lambda: hashlib.md5(data, usedforsecurity=False).digest()
            )
            content_md5 = base64.b64encode(digest).decode("ascii")
            await self._retrying(
                "put_object", what, Key=self._key(key), Body=data, ContentMD5=content_md5
            )

    async def delete(self, key: str) -> None:
        what = f"deleting {self.uri(key)}"
        with self._mapped(what):
            await self._retrying("delete_object", what, Key=self._key(key))

    # ------------------------------------------------------------------ reads

    async def get_bytes(self, key: str) -> bytes:
        what = f"downloading {self.uri(key)}"

        async def fetch() -> bytes:
            s3 = await self._s3()
            response = await s3.get_object(Bucket=self.bucket, Key=self._key(key))
            async with response["Body"] as body:
                return bytes(await body.read())

        with self._mapped(what):
            return await retrying(fetch, attempts=self.settings.max_attempts, what=what)

    async def _fetch_file(
        self, key: str, dest: Path, sha256: str | None, progress: ProgressFn | None
    ) -> None:
        uri = self.uri(key)
        with self._mapped(f"downloading {uri}"):
            sink = await asyncio.to_thread(PartialFile, dest, sha256=sha256, what=uri)
            try:
                await self._receive(self._key(key), sink, progress, f"GET {uri}")
                await asyncio.to_thread(sink.commit)
            except BaseException:
                sink.discard()
                raise

    async def _receive(
        self, full: str, sink: PartialFile, progress: ProgressFn | None, what: str
    ) -> None:
        """Stream the object into ``sink``; after a broken transfer, resume where it stopped."""
        s3 = await self._s3()
        etag: str | None = None

        async def fetch_from(start: int) -> None:
            nonlocal etag
            params: dict[str, Any] = {"Bucket": self.bucket, "Key": full}
            if start and etag:
                # Pinned to the ETag, so a replaced object fails instead of mixing bytes.
                params.update(Range=f"bytes={start}-", IfMatch=etag)
            try:
                response = await s3.get_object(**params)
            except Exception as exc:
                status = client_error_status(exc)[0]
                if status == 416 and start:
                    return  # an earlier attempt received everything; the digest check decides
                if status == 412:
                    # The object was replaced mid-download: start over with the new one.
                    await asyncio.to_thread(sink.restart)
                    etag = None
                    raise RetryableStatus(412) from exc
                raise
            if not start:
                etag = response.get("ETag")
            async with response["Body"] as body:
                await receive_chunks(body.iter_chunks(READ_CHUNK), sink, progress)

        await resuming(
            fetch_from, lambda: sink.size, attempts=self.settings.max_attempts, what=what
        )
