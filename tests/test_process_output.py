"""A child's output within a time limit: real processes; none left running past the limit or a
cancel."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from j2c_server.core.process_output import output_within


async def _python(code: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        code,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_a_process_that_ends_in_time_gives_its_output() -> None:
    process = await _python("import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)")
    assert await output_within(process, 30) == (b"out\n", b"err\n")
    assert process.returncode == 3


async def test_a_process_past_the_limit_is_killed_and_reaped() -> None:
    process = await _python("import time; print('started', flush=True); time.sleep(60)")
    assert await output_within(process, 0.5) is None
    assert process.returncode is not None  # reaped
    assert not _alive(process.pid)


async def test_a_cancelled_caller_leaves_no_process_and_stays_cancelled() -> None:
    process = await _python("import time; time.sleep(60)")
    waiting = asyncio.ensure_future(output_within(process, 30))
    await asyncio.sleep(0.3)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert process.returncode is not None
    assert not _alive(process.pid)
