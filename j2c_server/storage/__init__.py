"""Object storage for layers, manifests and job outputs: ``file://`` (embedded) and ``s3://``.

``open_store(url, settings)`` is the one way to get an :class:`ObjectStore`; ``download_uri``
fetches a single object by URI (for ``j2c-unpack``), and ``open_store_from_env(url)`` opens a
store with the job's ``J2C_STORAGE__*`` settings (``j2c-unpack``'s outputs). Importing this
package is cheap and stdlib-only (it runs inside jobs): the settings model (pydantic) loads only
for an ``s3://`` store or an HTTP download, the S3 client (aiobotocore) and httpx only when used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from j2c_server.core.errors import InvalidInput
from j2c_server.storage.base import (
    ObjectStore,
    ProgressFn,
    blob_key,
    is_content_addressed,
    manifest_key,
)
from j2c_server.storage.download import download_uri, settings_from_env, shared_from_env
from j2c_server.storage.errors import ObjectNotFound
from j2c_server.storage.file import FileStore
from j2c_server.storage.redact import redact_url
from j2c_server.storage.urls import SUPPORTED, file_url_path, split_s3_url, url_scheme

if TYPE_CHECKING:
    from j2c_server.storage.settings import StorageSettings

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
    "open_store_from_env",
    "redact_url",
]

FIELD = "storage.url"


def open_store(url: str, settings: StorageSettings | None = None) -> ObjectStore:
    """The store at ``url`` (``file:///path`` or ``s3://bucket/prefix``); no I/O happens yet.
    Without ``settings``, the defaults."""
    scheme = url_scheme(url)
    if scheme == "file":
        shared = settings.shared if settings is not None else False
        return FileStore(file_url_path(url, field=FIELD), shared=shared)
    if scheme == "s3":
        from j2c_server.storage.s3 import S3Store
        from j2c_server.storage.settings import StorageSettings

        bucket, prefix = split_s3_url(url, field=FIELD)
        return S3Store(bucket, prefix, settings if settings is not None else StorageSettings())
    raise InvalidInput(
        f"storage URL {redact_url(url)!r} is not supported", field=FIELD, hint=f"use {SUPPORTED}"
    )


def open_store_from_env(url: str) -> ObjectStore:
    """The store at ``url`` with the ``J2C_STORAGE__*`` settings only (a job has no config
    file); a ``file://`` store reads just ``storage.shared``, without the settings model."""
    if url_scheme(url) == "file":
        return FileStore(file_url_path(url, field=FIELD), shared=shared_from_env())
    return open_store(url, settings_from_env())
