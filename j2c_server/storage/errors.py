"""Turn what S3 clients and HTTP servers raise into actionable :class:`StorageError` messages.

Each message says what failed and where (the ``s3://`` URI, the endpoint); the ``hint`` says what
to check, naming the setting or environment variable involved. Nothing here ever puts a
credential into a message: access key ids, secrets and signatures stay out, and URLs are redacted.
"""

from __future__ import annotations

import sys

from j2c_server.core.errors import J2CError, StorageError
from j2c_server.storage.filerange import CorruptTransfer
from j2c_server.storage.redact import redact_text
from j2c_server.storage.retry import RetryableStatus, client_error_status

_CREDENTIALS_HINT = (
    "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE / storage.profile, "
    "or run where an instance or pod role provides credentials"
)


class ObjectNotFound(StorageError):
    """The key (or the URL) names no object."""

    status_code = 404
    code = "object_not_found"


def _botocore_name(exc: BaseException) -> str | None:
    """The botocore exception class name of ``exc`` (or of one of its bases), if it is one."""
    if "botocore.exceptions" not in sys.modules:
        return None
    for cls in type(exc).__mro__:
        if cls.__module__ == "botocore.exceptions":
            return cls.__name__
    return None


def map_s3_error(exc: BaseException, *, what: str, bucket: str, endpoint: str) -> J2CError:
    """The :class:`J2CError` to raise for ``exc``, which happened while doing ``what``."""
    if isinstance(exc, J2CError):
        return exc
    status, code = client_error_status(exc)
    if status is not None or code is not None:
        return _map_client_error(exc, status, code, what=what, bucket=bucket, endpoint=endpoint)
    if isinstance(exc, CorruptTransfer):
        return StorageError(
            f"{what}: {endpoint} kept storing other bytes than were sent",
            hint="something between this machine and the store alters data (a proxy, a "
            "failing network card) or the file changed during the upload",
        )
    name = _botocore_name(exc)
    if name == "NoCredentialsError":
        return StorageError(f"{what}: no storage credentials found", hint=_CREDENTIALS_HINT)
    if name == "PartialCredentialsError":
        return StorageError(
            f"{what}: the storage credentials are incomplete", hint=_CREDENTIALS_HINT
        )
    if name == "ProfileNotFound":
        return StorageError(
            f"{what}: {exc}",
            field="storage.profile",
            hint="name a profile from ~/.aws/config or ~/.aws/credentials",
        )
    if name == "SSLError":
        return StorageError(
            f"{what}: TLS with {endpoint} failed",
            hint="check the endpoint's certificate (AWS_CA_BUNDLE), or use http:// for a "
            "local test server",
        )
    if name in ("ReadTimeoutError", "ResponseStreamingError") or isinstance(exc, TimeoutError):
        return StorageError(
            f"{what}: {endpoint} stopped answering",
            hint="raise storage.read_timeout_s, lower storage.concurrency, or try again later",
        )
    if name in ("EndpointConnectionError", "ConnectTimeoutError", "ConnectionClosedError") or (
        isinstance(exc, ConnectionError)
    ):
        return StorageError(
            f"{what}: cannot reach the store at {endpoint}",
            hint="check storage.endpoint_url (or AWS_ENDPOINT_URL), that the server is up, "
            "and the network or proxy in between",
        )
    return StorageError(f"{what}: {type(exc).__name__}: {redact_text(str(exc))}")


def _map_client_error(
    exc: BaseException,
    status: int | None,
    code: str | None,
    *,
    what: str,
    bucket: str,
    endpoint: str,
) -> J2CError:
    where = f"bucket '{bucket}' at {endpoint}"
    if code == "NoSuchBucket":
        return StorageError(
            f"{what}: {where} does not exist",
            field="storage.url",
            hint="create the bucket, or fix the bucket name in storage.url",
        )
    if code == "NoSuchKey" or status == 404:
        return ObjectNotFound(f"{what}: no such object")
    if code in ("InvalidAccessKeyId", "InvalidClientTokenId"):
        return StorageError(
            f"{what}: {endpoint} does not know the access key id in use",
            hint="check AWS_ACCESS_KEY_ID or the profile's aws_access_key_id (storage.profile); "
            "keys of one service (AWS, MinIO, Ceph) do not work on another: check "
            "storage.endpoint_url",
        )
    if code == "SignatureDoesNotMatch":
        return StorageError(
            f"{what}: {endpoint} rejected the request signature",
            hint="check the secret key (AWS_SECRET_ACCESS_KEY or the profile's "
            "aws_secret_access_key); it does not belong to the access key id in use",
        )
    if code == "RequestTimeTooSkewed":
        return StorageError(
            f"{what}: this machine's clock differs too much from {endpoint}'s",
            hint="synchronise the clock (NTP); S3 refuses requests more than 15 minutes off",
        )
    if code in ("ExpiredToken", "ExpiredTokenException", "TokenRefreshRequired"):
        return StorageError(
            f"{what}: the session token has expired",
            hint="refresh the temporary credentials (aws sso login, or a new AWS_SESSION_TOKEN)",
        )
    if code in ("AuthorizationHeaderMalformed", "PermanentRedirect", "IncorrectEndpoint") or (
        status == 301
    ):
        return StorageError(
            f"{what}: {where} is in another region or needs another endpoint",
            field="storage.region",
            hint="set storage.region to the bucket's region (or storage.endpoint_url)",
        )
    if code in ("AccessDenied", "AllAccessDisabled", "AccountProblem") or status == 403:
        return StorageError(
            f"{what}: access denied to {where}",
            hint="the credentials in use lack a permission j2c needs (s3:GetObject, "
            "s3:PutObject, s3:ListBucket, s3:ListBucketMultipartUploads, s3:DeleteObject): "
            "check the IAM or bucket policy",
        )
    if code == "InvalidBucketName":
        return StorageError(f"{what}: '{bucket}' is not a valid bucket name", field="storage.url")
    message = _client_error_message(exc)
    if status is not None and (status >= 500 or status == 429):
        return StorageError(
            f"{what}: {endpoint} kept failing ({code or status}: {message})",
            hint="the store is overloaded or unwell; lower storage.concurrency or try again later",
        )
    return StorageError(f"{what}: {code or status}: {message}")


def _client_error_message(exc: BaseException) -> str:
    response = getattr(exc, "response", {})
    text = str(response.get("Error", {}).get("Message") or "").strip()
    return redact_text(text) if text else "no detail from the server"


def map_http_error(exc: BaseException, *, what: str, host: str) -> J2CError:
    """The :class:`J2CError` for a failed plain-HTTP(S) download (a presigned URL)."""
    if isinstance(exc, J2CError):
        return exc
    if isinstance(exc, RetryableStatus):
        return StorageError(
            f"{what}: {host} kept failing (HTTP {exc.status})", hint="try again later"
        )
    httpx = sys.modules.get("httpx")
    if isinstance(exc, TimeoutError) or (
        httpx is not None and isinstance(exc, httpx.TimeoutException)
    ):
        return StorageError(
            f"{what}: {host} stopped answering", hint="raise storage.read_timeout_s or try again"
        )
    if isinstance(exc, ConnectionError) or (
        httpx is not None and isinstance(exc, httpx.TransportError)
    ):
        return StorageError(
            f"{what}: cannot reach {host}",
            hint="check the network between this machine and the store",
        )
    return StorageError(f"{what}: {type(exc).__name__}: {redact_text(str(exc))}")


def http_status_error(status: int, *, what: str) -> J2CError:
    """The error for an HTTP status that retrying cannot fix."""
    if status == 404:
        return ObjectNotFound(f"{what}: no such object (HTTP 404)")
    if status in (401, 403):
        return StorageError(
            f"{what}: the server refused the URL (HTTP {status})",
            hint="presigned URLs expire (storage.presign_expiry_s) and die with the credentials "
            "that signed them: resubmit the job to get fresh ones",
        )
    return StorageError(f"{what}: unexpected HTTP {status}")
