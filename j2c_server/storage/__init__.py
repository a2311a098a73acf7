"""Object storage for layers, manifests and job outputs: ``file://`` (embedded) and ``s3://``.

``open_store(url, settings)`` is the one way to get an :class:`ObjectStore`; ``download_uri``
fetches a single object by URI (for ``j2c-unpack``). Importing this package is cheap: the S3
client (aiobotocore) and httpx load only when an ``s3://`` store or an HTTP download is used.
"""

from __future__ import annotations

from ..config import StorageSettings
from ..errors import InvalidInput
from .base import ObjectStore, ProgressFn, blob_key, is_content_addressed, manifest_key
from .download import download_uri
from .errors import ObjectNotFound
from .file import FileStore
from .redact import redact_url
from .urls import SUPPORTED, file_url_path, split_s3_url, url_scheme

__all__ = [
    "FileStore",
    "ObjectNotFound",
    "ObjectStore",
    "ProgressFn",
    "blob_key",
    "download_uri",
    "is_content_addressed",
    "manifest_key",
    "open_store",
    "redact_url",
]

FIELD = "storage.url"


def open_store(url: str, settings: StorageSettings | None = None) -> ObjectStore:
    """The store at ``url`` (``file:///path`` or ``s3://bucket/prefix``); no I/O happens yet."""
    settings = settings if settings is not None else StorageSettings()
    scheme = url_scheme(url)
    if scheme == "file":
        return FileStore(file_url_path(url, field=FIELD), shared=settings.shared)
    if scheme == "s3":
        from .s3 import S3Store

        bucket, prefix = split_s3_url(url, field=FIELD)
        return S3Store(bucket, prefix, settings)
    raise InvalidInput(
        f"storage URL {redact_url(url)!r} is not supported", field=FIELD, hint=f"use {SUPPORTED}"
    )
