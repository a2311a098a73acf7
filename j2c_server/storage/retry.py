"""Retries for storage requests: which failures are transient, and backoff with jitter.

botocore's own retries are switched off for j2c's clients so that this module is the one place
that decides: a part upload, a ranged download and a presigned-URL fetch all retry the same way.
Classification looks exception classes up in ``sys.modules`` instead of importing botocore,
aiohttp or httpx here: an exception of a library that was never imported cannot occur.
"""

from __future__ import annotations

import asyncio
import logging
import random
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from .filerange import CorruptTransfer
from .redact import redact_text

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


def backoff_delay(attempt: int) -> float:
    """Seconds to wait before retry number ``attempt`` (1-based): exponential, half jittered."""
    ceiling = min(MAX_DELAY_S, BASE_DELAY_S * 2.0 ** (attempt - 1))
    return ceiling / 2 + random.uniform(0, ceiling / 2)


async def pause_before_retry(exc: BaseException, attempt: int, attempts: int, what: str) -> None:
    """Log the transient failure of ``what`` and sleep before retry number ``attempt``."""
    delay = backoff_delay(attempt)
    log.warning(
        "%s failed (%s), retry %d/%d in %.2fs",
        what,
        redact_text(f"{type(exc).__name__}: {exc}")[:300],
        attempt,
        attempts - 1,
        delay,
    )
    await asyncio.sleep(delay)


async def retrying(op: Callable[[], Awaitable[T]], *, attempts: int, what: str) -> T:
    """Run ``op`` until it succeeds, a non-transient error occurs, or ``attempts`` are used up."""
    attempt = 1
    while True:
        try:
            return await op()
        except Exception as exc:
            if attempt >= attempts or not is_transient(exc):
                raise
            await pause_before_retry(exc, attempt, attempts, what)
            attempt += 1


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
    attempt = 1
    while True:
        start = position()
        try:
            await fetch_from(start)
            return
        except Exception as exc:
            progressed = position() > start
            if not is_transient(exc) or (attempt >= attempts and not progressed):
                raise
            attempt = 1 if progressed else attempt
            await pause_before_retry(exc, attempt, attempts, what)
            attempt += 1
