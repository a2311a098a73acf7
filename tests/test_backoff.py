"""The one retry loop (``j2c_server.core.backoff``): budget, what is retried, progress, delays."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from j2c_server.core.backoff import Backoff, retry_async, retry_sync


class Flaky(Exception):
    pass


def policy(
    retries: list[tuple[int, float]], attempts: int | None = 3, *, jitter: bool = False
) -> Backoff:
    return Backoff(
        lambda exc: isinstance(exc, Flaky),
        lambda _exc, attempt, delay: retries.append((attempt, delay)),
        attempts=attempts,
        base_s=0.001,
        max_s=0.004,
        jitter=jitter,
    )


def failing(times: int, error: Exception) -> tuple[list[int], Callable[[], str]]:
    calls: list[int] = []

    def op() -> str:
        calls.append(1)
        if len(calls) <= times:
            raise error
        return "done"

    return calls, op


def test_retries_until_it_works_with_doubling_capped_delays() -> None:
    retries: list[tuple[int, float]] = []
    calls, op = failing(4, Flaky())
    assert retry_sync(op, policy(retries, attempts=None)) == "done"
    assert len(calls) == 5
    assert retries == [(1, 0.001), (2, 0.002), (3, 0.004), (4, 0.004)]


def test_the_last_error_is_raised_once_the_budget_is_spent() -> None:
    retries: list[tuple[int, float]] = []
    calls, op = failing(10, Flaky("still down"))
    with pytest.raises(Flaky, match="still down"):
        retry_sync(op, policy(retries, attempts=3))
    assert len(calls) == 3 and len(retries) == 2


def test_an_error_not_worth_retrying_is_raised_at_once() -> None:
    retries: list[tuple[int, float]] = []
    calls, op = failing(1, ValueError("bad"))
    with pytest.raises(ValueError):
        retry_sync(op, policy(retries))
    assert len(calls) == 1 and retries == []


def test_jitter_keeps_the_delay_in_the_upper_half() -> None:
    backoff = policy([], jitter=True)
    delays = [backoff.delay(3) for _ in range(50)]
    assert all(0.002 <= delay <= 0.004 for delay in delays)
    assert len(set(delays)) > 1


async def test_progress_between_failures_starts_a_fresh_budget() -> None:
    retries: list[tuple[int, float]] = []
    received = 0

    async def op() -> str:
        nonlocal received
        received += 1  # every try gets somewhere, then breaks: never out of budget
        if received < 6:
            raise Flaky()
        return "done"

    assert await retry_async(op, policy(retries, attempts=2), progress=lambda: received) == "done"
    assert retries == [(1, 0.001)] * 5


async def test_without_progress_the_async_loop_keeps_the_budget() -> None:
    retries: list[tuple[int, float]] = []

    async def op() -> str:
        raise Flaky()

    with pytest.raises(Flaky):
        await retry_async(op, policy(retries, attempts=2), progress=lambda: 0)
    assert retries == [(1, 0.001)]
