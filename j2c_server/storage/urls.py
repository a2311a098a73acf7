"""Parsing the store and object URLs j2c accepts: ``file:///path`` and ``s3://bucket/key``.

A URL that cannot work is refused here, before any I/O, with an :class:`InvalidInput` naming
the setting it came from. Credentials inside a URL (``s3://key:secret@bucket``) are refused too:
they belong in the AWS credential chain, not in settings that end up in logs.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import SplitResult, unquote, urlsplit

from j2c_server.core.errors import InvalidInput
from j2c_server.storage.base import check_key
from j2c_server.storage.redact import redact_url

_BUCKET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{1,253}[A-Za-z0-9]$")
SUPPORTED = "file:///absolute/path or s3://bucket/prefix"


def _split(url: str, field: str) -> SplitResult:
    try:
        parts = urlsplit(url)
    except ValueError:
        raise InvalidInput(f"{redact_url(url)!r} is not a URL", field=field) from None
    if parts.query or parts.fragment:
        raise InvalidInput(
            f"{redact_url(url)!r}: a storage URL takes no query or fragment", field=field
        )
    return parts


def url_scheme(url: str) -> str:
    return urlsplit(url).scheme.lower() if "://" in url else ""


def file_url_path(url: str, *, field: str) -> Path:
    """The local path of a ``file://`` URL (absolute; ``localhost`` as host is accepted)."""
    parts = _split(url, field)
    if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
        raise InvalidInput(
            f"{url!r} does not name an absolute path",
            field=field,
            hint="file URLs have three slashes: file:///absolute/path",
        )
    return Path(unquote(parts.path))


def split_s3_url(url: str, *, field: str) -> tuple[str, str]:
    """``s3://bucket/some/key`` → ``("bucket", "some/key")``; the key may be empty."""
    parts = _split(url, field)
    if "@" in parts.netloc:
        raise InvalidInput(
            f"{redact_url(url)!r} holds credentials",
            field=field,
            hint="remove them: credentials come from the AWS chain (environment, profile, role)",
        )
    bucket = parts.netloc
    if not bucket:
        raise InvalidInput(f"{url!r} names no bucket", field=field, hint=f"use {SUPPORTED}")
    if not _BUCKET.match(bucket):
        raise InvalidInput(
            f"{bucket!r} is not a valid bucket name",
            field=field,
            hint="3 to 255 letters, digits, '.', '-' or '_', starting and ending alphanumeric",
        )
    key = unquote(parts.path).strip("/")
    if key:
        try:
            check_key(key)
        except InvalidInput:
            raise InvalidInput(
                f"{url!r}: the path after the bucket is not a valid key prefix",
                field=field,
                hint="no empty, '.' or '..' segments",
            ) from None
    return bucket, key
