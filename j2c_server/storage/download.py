"""Fetch one object by URI into a local file, verified: what ``j2c-unpack`` calls in a job.

``file://`` copies, ``s3://`` uses the S3 store (credentials from the AWS chain of the job's
machine), ``https://`` and ``http://`` stream a presigned URL with httpx (no credentials at all).
Every scheme resumes broken transfers, checks the sha256 when one is given, and leaves either the
complete file at ``dest`` or nothing. Heavy clients are imported only by the scheme that needs
them, so a job that downloads over HTTPS never loads aiobotocore. Settings come from the job's
``J2C_STORAGE__*`` environment (:func:`settings_from_env`), validated only by a scheme that
uses them: reading or writing a ``file://`` store loads no settings model (no pydantic).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from j2c_server.core.errors import InvalidInput
from j2c_server.storage.base import ProgressFn
from j2c_server.storage.errors import ObjectNotFound, http_status_error, map_http_error
from j2c_server.storage.redact import install_log_redaction, redact_url
from j2c_server.storage.retry import RetryableStatus, resuming
from j2c_server.storage.sink import PartialFile, copy_file_atomic, receive_chunks
from j2c_server.storage.urls import file_url_path, split_s3_url, url_scheme

if TYPE_CHECKING:
    from j2c_server.storage.settings import StorageSettings

READ_CHUNK = 1024 * 1024
ENV_PREFIX = "J2C_STORAGE__"  # J2C_ as written, the rest in any case (as config.py reads it)
# pydantic's spellings of a boolean; another value is left to the model, which refuses it.
_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "f", "false", "n", "no", "off"})


def storage_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``J2C_STORAGE__<KEY>`` variables as ``{key: value}``."""
    environ = os.environ if environ is None else environ
    return {
        name[len(ENV_PREFIX) :].lower(): value
        for name, value in environ.items()
        if name.startswith("J2C_") and name[4:].upper().startswith(ENV_PREFIX[4:])
    }


def settings_from_env(environ: Mapping[str, str] | None = None) -> StorageSettings:
    """Storage settings from ``J2C_STORAGE__*`` variables only (a job has no config file)."""
    from j2c_server.storage.settings import validate_storage

    return validate_storage(storage_env(environ), source=f"{ENV_PREFIX}* environment")


def shared_from_env(environ: Mapping[str, str] | None = None) -> bool:
    """``storage.shared`` from the environment: all a ``file://`` store reads, without the
    settings model for a plain boolean (another value is refused by it, naming the key)."""
    value = storage_env(environ).get("shared")
    if value is None:
        return False
    word = value.lower()
    if word in _TRUE or word in _FALSE:
        return word in _TRUE
    return settings_from_env(environ).shared


async def download_uri(
    uri: str,
    dest: Path,
    sha256: str | None = None,
    progress: ProgressFn | None = None,
    *,
    settings: StorageSettings | None = None,
) -> None:
    """Write the object at ``uri`` to ``dest``; with ``sha256`` (hex) verify it first."""
    scheme = url_scheme(uri)
    if scheme == "file":
        source = file_url_path(uri, field="uri")
        try:
            await copy_file_atomic(source, dest, sha256=sha256, progress=progress, what=uri)
        except FileNotFoundError as exc:
            if exc.filename != str(source):
                raise
            raise ObjectNotFound(f"reading {uri}: no such file") from None
    elif scheme == "s3":
        from j2c_server.storage.s3 import S3Store

        bucket, key = split_s3_url(uri, field="uri")
        store = S3Store(bucket, "", settings or settings_from_env())
        try:
            await store.get_file(key, dest, sha256=sha256, progress=progress)
        finally:
            await store.close()
    elif scheme in ("http", "https"):
        await _download_http(uri, dest, sha256, progress, settings or settings_from_env())
    else:
        raise InvalidInput(
            f"cannot download {redact_url(uri)!r}",
            field="uri",
            hint="supported: file://, s3://, https:// and http://",
        )


async def _download_http(
    url: str,
    dest: Path,
    sha256: str | None,
    progress: ProgressFn | None,
    settings: StorageSettings,
) -> None:
    import httpx

    install_log_redaction()
    shown = redact_url(url)
    what = f"downloading {shown}"
    timeout = httpx.Timeout(settings.read_timeout_s, connect=settings.connect_timeout_s)
    sink = await asyncio.to_thread(PartialFile, dest, sha256=sha256, what=shown)
    try:
        async with httpx.AsyncClient(timeout=timeout, follow_redirects=True) as client:

            async def fetch_from(start: int) -> None:
                headers = {"Accept-Encoding": "identity"}
                if start:
                    headers["Range"] = f"bytes={start}-"
                async with client.stream("GET", url, headers=headers) as response:
                    status = response.status_code
                    if status == 416 and start:
                        return  # an earlier attempt received everything; the digest decides
                    if status >= 500 or status == 429:
                        raise RetryableStatus(status)
                    if status not in (200, 206):
                        raise http_status_error(status, what=what)
                    if start and status == 200:
                        await asyncio.to_thread(sink.restart)  # the server ignored the range
                    await receive_chunks(response.aiter_raw(READ_CHUNK), sink, progress)

            try:
                await resuming(
                    fetch_from,
                    lambda: sink.size,
                    attempts=settings.max_attempts,
                    what=f"GET {shown}",
                )
            except Exception as exc:
                raise map_http_error(exc, what=what, host=urlsplit(shown).netloc) from None
        await asyncio.to_thread(sink.commit)
    except BaseException:
        sink.discard()
        raise
