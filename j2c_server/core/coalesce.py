"""Many small calls answered by one: the calls of one kind made in the same event-loop step (the
once-a-second checks of every running job, woken together by :func:`next_tick_s`) go to one
batched call, so a hundred jobs' checks cost one thread hop and one query, not a hundred.

Stdlib only. A call's own failure (a job that is gone) is that caller's alone; a failure of the
batched call is every caller's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
R = TypeVar("R")
# What a batch answers: each key's result, or the exception its caller gets.
Answers = dict[K, R | BaseException]


def next_tick_s(interval_s: float) -> float:
    """Seconds until the next multiple of ``interval_s`` on the monotonic clock: periodic
    checks that sleep this long wake in the same loop step and share their batched calls."""
    return interval_s - time.monotonic() % interval_s


class Coalesced(Generic[K, R]):
    """``await coalesced(key)``: the keys asked for in one loop step are answered by one
    ``run_batch(keys)`` (each key once, however many callers asked for it)."""

    def __init__(self, run_batch: Callable[[list[K]], Awaitable[Answers[K, R]]]) -> None:
        self._run_batch = run_batch
        self._waiting: dict[K, list[asyncio.Future[R]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[None]] = set()  # the loop keeps only weak references

    async def __call__(self, key: K) -> R:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a CLI's earlier asyncio.run left its own behind
            self._loop, self._waiting = loop, {}
        future: asyncio.Future[R] = loop.create_future()
        if not self._waiting:
            loop.call_soon(self._start)
        self._waiting.setdefault(key, []).append(future)
        return await future

    def _start(self) -> None:
        batch, self._waiting = self._waiting, {}
        if batch:
            task = asyncio.ensure_future(self._answer(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _answer(self, batch: dict[K, list[asyncio.Future[R]]]) -> None:
        try:
            answers: Answers[K, R] = await self._run_batch(list(batch))
        except asyncio.CancelledError:  # the loop is stopping
            for futures in batch.values():
                for future in futures:
                    future.cancel()
            raise
        except Exception as exc:  # every caller's
            answers = {key: exc for key in batch}
        for key, futures in batch.items():
            answer = answers.get(key, KeyError(key))
            for future in futures:
                if future.done():  # its caller was cancelled meanwhile
                    continue
                if isinstance(answer, BaseException):
                    future.set_exception(answer)
                else:
                    future.set_result(answer)
