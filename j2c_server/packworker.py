"""Scanning and packing in worker processes at a lower CPU priority, off the server's loop.

``preflight`` and ``pack`` walk, hash and compress: CPU-heavy Python. In a thread of the server
they would share its GIL and the event loop would wait for it (tens of milliseconds at p99 while
a large venv is packed); in a separate, niced process the loop keeps its latency.

A worker is ``python -m j2c_server.packworker``: it reads one JSON request per line on stdin and
answers with progress lines, then one result (or error) line, on stdout. Workers are kept for
the next request; one whose caller gives up (a cancelled job) is killed, so it stops burning CPU
at once. A worker exits when its stdin closes, so it never outlives its parent for long.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import errors
from .errors import J2CError
from .models import LayerRole
from .pack import PackPlan, PackProgress, PackResult, PackSpec, pack, preflight

NICENESS = 10
LINE_LIMIT = 64 * 1024 * 1024  # a plan or result is one JSON line
ProgressFn = Callable[[PackProgress], None]


def pack_and_date(
    spec: PackSpec, cache_dir: Path, progress: ProgressFn | None = None
) -> tuple[PackResult, float]:
    """Pack, and date the result by its newest layer blob: the same layers always give the
    same manifest (and digest)."""
    result = pack(spec, cache_dir, progress)
    return result, max((packed.path.stat().st_mtime for packed in result.layers), default=0.0)


# --------------------------------------------------------------------------- the worker side


def _serve() -> None:
    os.nice(NICENESS)
    out = sys.stdout
    lock = threading.Lock()  # the packer reports progress from its own threads

    def send(message: dict[str, Any]) -> None:
        with lock:
            out.write(json.dumps(message) + "\n")
            out.flush()

    def report(progress: PackProgress) -> None:
        send({"progress": {**dataclasses.asdict(progress), "role": progress.role.value}})

    for line in sys.stdin:
        request = json.loads(line)
        spec = PackSpec.model_validate(request["spec"])
        try:
            if request["kind"] == "preflight":
                send({"plan": preflight(spec).model_dump(mode="json")})
            else:
                result, packed_at = pack_and_date(spec, Path(request["cache_dir"]), report)
                send({"result": result.model_dump(mode="json"), "packed_at": packed_at})
        except J2CError as exc:
            send({"error": {"type": type(exc).__name__, **exc.to_dict()}})
        except Exception as exc:
            detail = "".join(traceback.format_exception_only(exc)).strip()
            send({"error": {"type": "J2CError", "message": f"packing failed: {detail}"}})


# --------------------------------------------------------------------------- the server side


def _raise(error: dict[str, Any]) -> None:
    kind = getattr(errors, error.get("type", ""), J2CError)
    if not (isinstance(kind, type) and issubclass(kind, J2CError)):
        kind = J2CError
    raise kind(error["message"], field=error.get("field"), hint=error.get("hint"))


class _Worker:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @classmethod
    async def start(cls) -> _Worker:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            __name__,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            limit=LINE_LIMIT,
            # Its own session: a Ctrl-C in the CLI's terminal or a kernel interrupt (sent to the
            # whole process group) must not kill a pack in progress; it exits when stdin closes.
            start_new_session=True,
        )
        return cls(process)

    async def ask(self, request: dict[str, Any], progress: ProgressFn | None) -> dict[str, Any]:
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        stdin.write(json.dumps(request).encode() + b"\n")
        await stdin.drain()
        while True:
            line = await stdout.readline()
            if not line:
                raise J2CError("the packing process ended unexpectedly")
            reply: dict[str, Any] = json.loads(line)
            if "progress" not in reply:
                return reply
            if progress is not None:
                fields = reply["progress"]
                progress(PackProgress(**{**fields, "role": LayerRole(fields["role"])}))

    def kill(self) -> None:
        if self.process.returncode is None:
            self.process.kill()

    async def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        await self.process.wait()


class PackWorkers:
    """Up to ``workers`` packing processes, started on demand and reused."""

    def __init__(self, workers: int) -> None:
        self._slots = asyncio.Semaphore(workers)
        self._idle: list[_Worker] = []
        self._warming: asyncio.Task[None] | None = None

    def warm(self) -> None:
        """Start a worker now, so the first pack does not wait for an interpreter to start."""

        async def start_one() -> None:
            self._idle.append(await _Worker.start())

        self._warming = asyncio.get_running_loop().create_task(start_one())

    async def preflight(self, spec: PackSpec) -> PackPlan:
        reply = await self._ask({"kind": "preflight", "spec": spec.model_dump(mode="json")}, None)
        return PackPlan.model_validate(reply["plan"])

    async def pack(
        self, spec: PackSpec, cache_dir: Path, progress: ProgressFn | None = None
    ) -> tuple[PackResult, float]:
        request = {
            "kind": "pack",
            "spec": spec.model_dump(mode="json"),
            "cache_dir": str(cache_dir),
        }
        reply = await self._ask(request, progress)
        return PackResult.model_validate(reply["result"]), float(reply["packed_at"])

    async def _ask(self, request: dict[str, Any], progress: ProgressFn | None) -> dict[str, Any]:
        async with self._slots:
            if self._warming is not None:
                await self._warming
                self._warming = None
            worker = self._idle.pop() if self._idle else await _Worker.start()
            try:
                reply = await worker.ask(request, progress)
            except BaseException:
                worker.kill()  # a half-answered worker cannot serve anyone else
                await worker.close()
                raise
            self._idle.append(worker)
        if "error" in reply:
            _raise(reply["error"])
        return reply

    async def close(self) -> None:
        if self._warming is not None:
            self._warming.cancel()
        idle, self._idle = self._idle, []
        for worker in idle:
            await worker.close()


if __name__ == "__main__":
    _serve()
