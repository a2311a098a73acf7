"""In-process wake-ups for event subscribers.

Events live in the registry; this only tells subscribers in the same process that a job has new
ones, so they read them at once instead of at their next poll. A subscriber reads from the
registry after every wake-up (or poll), so what it sees is always what was persisted, in order.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager


class EventBus:
    def __init__(self) -> None:
        self._waiters: defaultdict[str, set[asyncio.Event]] = defaultdict(set)

    def publish(self, job_id: str) -> None:
        for waiter in self._waiters.get(job_id, ()):
            waiter.set()

    @contextmanager
    def subscribe(self, job_id: str) -> Iterator[asyncio.Event]:
        """An event that is set whenever ``job_id`` gets new events; clear it before reading."""
        waiter = asyncio.Event()
        self._waiters[job_id].add(waiter)
        try:
            yield waiter
        finally:
            self._waiters[job_id].discard(waiter)
            if not self._waiters[job_id]:
                del self._waiters[job_id]
