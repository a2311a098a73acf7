"""A child process's output within a time limit, the process killed and reaped past it.

Not ``asyncio.wait_for``: on Python 3.11 a cancel that lands as the wait ends can be swallowed
(the caller then runs on as if not cancelled), and on 3.10 its timeout is
``asyncio.TimeoutError``, which ``except TimeoutError`` does not catch.
"""

from __future__ import annotations

import asyncio
import contextlib


async def output_within(
    process: asyncio.subprocess.Process, timeout_s: float
) -> tuple[bytes, bytes] | None:
    """(stdout, stderr) once the process exits (b"" for a stream not piped), or None when it
    did not within ``timeout_s``. A process not done by then, or when the caller is cancelled,
    is killed and reaped: none is left running."""
    talking = asyncio.ensure_future(process.communicate())
    try:
        done, _ = await asyncio.wait({talking}, timeout=timeout_s)
        if talking in done:
            out, err = talking.result()
            return out or b"", err or b""
        return None
    finally:
        if not talking.done():
            talking.cancel()
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await asyncio.shield(process.wait())
            with contextlib.suppress(asyncio.CancelledError):
                await talking
