"""Retries for storage requests: which failures are transient; backoff with jitter (the loop is
``j2c_server.core.backoff``'s).

botocore's own retries are switched off for j2c's clients so that this module is the one place
that decides: a part upload, a ranged download and a presigned-URL fetch all retry the same way.
Classification looks exception classes up in ``sys.modules`` instead of importing botocore,
aiohttp or httpx here: an exception of a library that was never imported cannot occur.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from j2c_server.core.backoff import Backoff, retry_async
from j2c_server.storage.filerange import CorruptTransfer
from j2c_server.storage.redact import redact_text

log = logging.getLogger("j2c.storage")

T = TypeVar("T")

BASE_DELAY_S = 0.25
MAX_DELAY_S = 8.0

# Error codes S3 and S3-compatible servers use for "try again": throttling, overload,
# server-side timeouts, and a body that arrived damaged (BadDigest: checksum mismatch).
TRANSIENT_CODES = frozenset(
    {
        "BadDigest",
        "InternalError",
        "ServiceUnavailable",
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "BandwidthLimitExceeded",
        "RequestTimeout",
        "RequestTimeoutException",
        "OperationAborted",
    }
)


class RetryableStatus(Exception):
    """An HTTP response whose status says "try again" (5xx, 429) from a plain HTTP client."""

    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


def _classes(module: str, *names: str) -> tuple[type[BaseException], ...]:
    loaded = sys.modules.get(module)
    if loaded is None:
        return ()
    return tuple(getattr(loaded, name) for name in names if hasattr(loaded, name))


def client_error_status(exc: BaseException) -> tuple[int | None, str | None]:
    """(HTTP status, error code) of a botocore ClientError, or (None, None) for anything else."""
    response: Any = getattr(exc, "response", None)
    if not isinstance(response, dict) or "Error" not in response:
        return None, None
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    code = response.get("Error", {}).get("Code")
    return (status if isinstance(status, int) else None), (str(code) if code else None)


def is_transient(exc: BaseException) -> bool:
    """True when repeating the same request may succeed."""
    if isinstance(exc, RetryableStatus | CorruptTransfer | ConnectionError | TimeoutError):
        return True
    status, code = client_error_status(exc)
    if status is not None or code is not None:
        return (status is not None and (status >= 500 or status == 429)) or (
            code in TRANSIENT_CODES
        )
    if isinstance(exc, _classes("botocore.exceptions", "SSLError")):
        return False
    transient = (
        _classes("botocore.exceptions", "HTTPClientError", "ConnectionError", "IncompleteReadError")
        + _classes("aiohttp", "ClientConnectionError", "ClientPayloadError")
        + _classes("httpx", "TimeoutException", "NetworkError", "RemoteProtocolError")
    )
    return bool(transient) and isinstance(exc, transient)


def _backoff(attempts: int, what: str) -> Backoff:
    def on_retry(exc: BaseException, attempt: int, delay: float) -> None:
        log.warning(
            "%s failed (%s), retry %d/%d in %.2fs",
            what,
            redact_text(f"{type(exc).__name__}: {exc}")[:300],
            attempt,
            attempts - 1,
            delay,
        )

    return Backoff(
        is_transient,
        on_retry,
        attempts=attempts,
        base_s=BASE_DELAY_S,
        max_s=MAX_DELAY_S,
        jitter=True,
    )


async def retrying(op: Callable[[], Awaitable[T]], *, attempts: int, what: str) -> T:
    """Run ``op`` until it succeeds, a non-transient error occurs, or ``attempts`` are used up."""
    return await retry_async(op, _backoff(attempts, what))


async def resuming(
    fetch_from: Callable[[int], Awaitable[None]],
    position: Callable[[], int],
    *,
    attempts: int,
    what: str,
) -> None:
    """Run ``fetch_from(position())`` until it completes; a transfer that broke after receiving
    some bytes resumes from there with a fresh retry budget, one that received none uses it up.
    """
    await retry_async(lambda: fetch_from(position()), _backoff(attempts, what), progress=position)
