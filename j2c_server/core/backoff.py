"""Retrying with exponential backoff: the one loop behind the storage clients, the watch stage
and j2c-unpack's downloads.

What is worth retrying and how a retry is reported are the caller's (:class:`Backoff`'s
``retryable`` and ``on_retry``); the budget, the delays and the loop are here. Standard library
only, and asyncio only once awaited: j2c-unpack imports this module at every job's start-up.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    """How to retry: which errors, how often (``attempts`` in all; None: until it works), how
    long to wait, and whom to tell (``on_retry(error, retry number, delay)``)."""

    retryable: Callable[[BaseException], bool]
    on_retry: Callable[[BaseException, int, float], None]
    attempts: int | None = None
    base_s: float = 1.0
    max_s: float = 30.0
    jitter: bool = False

    def delay(self, attempt: int) -> float:
        """Seconds before retry number ``attempt`` (1-based): doubling up to ``max_s``; with
        ``jitter``, the upper half is random (clients that failed together retry apart)."""
        ceiling = min(self.max_s, self.base_s * 2.0 ** (attempt - 1))
        return ceiling / 2 + random.uniform(0, ceiling / 2) if self.jitter else ceiling


class _Tries:
    """One call's retry budget. With ``progress``, a try that got further than the one before
    (its value changed: bytes received, lines read) starts a fresh budget."""

    def __init__(self, backoff: Backoff, progress: Callable[[], object] | None) -> None:
        self.backoff = backoff
        self.progress = progress
        self.mark = progress() if progress is not None else None
        self.attempt = 1

    def delay_after(self, exc: BaseException) -> float | None:
        """Seconds to wait before the next try after ``exc``; None: give up, re-raise it."""
        if not self.backoff.retryable(exc):
            return None
        if self.progress is not None and (mark := self.progress()) != self.mark:
            self.mark, self.attempt = mark, 1
        elif self.backoff.attempts is not None and self.attempt >= self.backoff.attempts:
            return None
        delay = self.backoff.delay(self.attempt)
        self.backoff.on_retry(exc, self.attempt, delay)
        self.attempt += 1
        return delay


async def retry_async(
    op: Callable[[], Awaitable[T]],
    backoff: Backoff,
    *,
    progress: Callable[[], object] | None = None,
) -> T:
    """``await op()`` until it returns, fails with an error not worth retrying, or the budget
    is spent (the last error is raised)."""
    import asyncio  # here, not at the top: j2c-unpack's synchronous downloads never need it

    tries = _Tries(backoff, progress)
    while True:
        try:
            return await op()
        except Exception as exc:
            if (delay := tries.delay_after(exc)) is None:
                raise
            await asyncio.sleep(delay)


def retry_sync(op: Callable[[], T], backoff: Backoff) -> T:
    """:func:`retry_async` for a blocking ``op`` (j2c-unpack's threads), sleeping in between."""
    tries = _Tries(backoff, None)
    while True:
        try:
            return op()
        except Exception as exc:
            if (delay := tries.delay_after(exc)) is None:
                raise
            time.sleep(delay)
