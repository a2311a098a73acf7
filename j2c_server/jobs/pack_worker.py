"""Scanning and packing in worker processes at a lower CPU priority, off the server's loop.

``preflight`` and ``pack`` walk, hash and compress: CPU-heavy Python. In a thread of the server
they would share its GIL and the event loop would wait for it (tens of milliseconds at p99 while
a large venv is packed); in a separate, niced process the loop keeps its latency.

A worker is ``python -m j2c_server.jobs.pack_worker``: it reads one JSON request per line on
stdin and answers with progress lines, then one result (or error) line, on stdout. Workers are
kept for the next request; one whose caller gives up (a cancelled job) is killed, so it stops
burning CPU at once. A worker exits when its stdin closes, so it never outlives its parent for long.

A one-shot command (the CLI) has no event loop to keep responsive and its user waits for the pack:
its workers are threads of its own process (``in_process=True``), answering the same requests, so
a send does not pay for another interpreter's start (0.8 s on a loaded machine, measured) nor
wait, niced, behind other work.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import secrets
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from j2c_server.core import errors
from j2c_server.core.errors import J2CError
from j2c_server.pack import PackPlan, PackProgress, PackResult, PackSpec, pack, preflight
from j2c_server.pack.changes import ScanReport, scan_report
from j2c_server.pack.plan import Prepared, prepare
from j2c_server.pack.venv_scans import VenvScans
from j2c_server.wire.manifest import LayerRole

NICENESS = 10
LINE_LIMIT = 64 * 1024 * 1024  # a plan or result is one JSON line
HELD_SCANS = 4  # scans a worker keeps for the packs that follow them
SCAN_FRESH_S = 60.0  # an older scan is walked again before packing
ProgressFn = Callable[[PackProgress], None]


def pack_and_date(
    spec: PackSpec,
    cache_dir: Path,
    progress: ProgressFn | None = None,
    prepared: Prepared | None = None,
) -> tuple[PackResult, float]:
    """Pack, and date the result by its newest layer blob: the same layers always give the
    same manifest (and digest)."""
    result = pack(spec, cache_dir, progress, prepared)
    return result, max((packed.path.stat().st_mtime for packed in result.layers), default=0.0)


@dataclasses.dataclass
class Scan:
    """A send's scan: the report, and where its walk is held for the pack that follows."""

    report: ScanReport
    spec: PackSpec
    token: str
    worker: _Worker | _ThreadWorker | None = None
    at: float = dataclasses.field(default_factory=time.monotonic)

    @property
    def fresh(self) -> bool:
        return time.monotonic() - self.at < SCAN_FRESH_S


# --------------------------------------------------------------------------- the worker side


class _Answers:
    """What a worker does with a request, in a process or a thread: the scans it holds for the
    packs that follow them, and the venvs' scans a watch vouches for."""

    def __init__(self) -> None:
        self.held: dict[str, Prepared] = {}  # oldest first
        self.venv_scans = VenvScans()

    def answer(self, request: dict[str, Any], report: ProgressFn) -> dict[str, Any]:
        spec = PackSpec.model_validate(request["spec"])
        try:
            if request["kind"] == "preflight":
                return {"plan": preflight(spec, self.venv_scans).model_dump(mode="json")}
            if request["kind"] == "scan":
                prepared = prepare(spec, self.venv_scans)
                scan = scan_report(prepared, Path(request["cache_dir"]), request["compare"])
                self.held[request["token"]] = prepared
                while len(self.held) > HELD_SCANS:
                    del self.held[next(iter(self.held))]
                return {"scan": scan.model_dump(mode="json")}
            kept: Prepared | None = self.held.pop(request.get("scan") or "", None)
            result, packed_at = pack_and_date(spec, Path(request["cache_dir"]), report, kept)
            return {"result": result.model_dump(mode="json"), "packed_at": packed_at}
        except J2CError as exc:
            return {"error": {"type": type(exc).__name__, **exc.to_dict()}}
        except Exception as exc:
            # The layer cache is in the data dir: a full disk there is the server's 507, and a
            # job's driver waits for space (jobs/drive/lease.py), rather than "packing failed".
            folder = str(request.get("cache_dir") or "its layer cache")
            if (full := errors.disk_full_to_j2c(exc, folder)) is not None:
                return {"error": {"type": "DiskFull", **full.to_dict()}}
            detail = "".join(traceback.format_exception_only(exc)).strip()
            return {"error": {"type": "J2CError", "message": f"packing failed: {detail}"}}


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

    answers = _Answers()
    for line in sys.stdin:
        send(answers.answer(json.loads(line), report))


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


class _ThreadWorker:
    """A worker in a thread of this process, for a one-shot command (see the module docstring).
    A thread cannot be killed: a pack whose caller gives up runs on to its end, or to the end of
    the command's process, whichever comes first."""

    def __init__(self) -> None:
        self._answers = _Answers()

    async def ask(self, request: dict[str, Any], progress: ProgressFn | None) -> dict[str, Any]:
        loop = asyncio.get_running_loop()

        def report(event: PackProgress) -> None:
            if progress is not None:
                loop.call_soon_threadsafe(progress, event)

        return await asyncio.to_thread(self._answers.answer, request, report)

    def kill(self) -> None:
        pass

    async def close(self) -> None:
        pass


class PackWorkers:
    """Up to ``workers`` packing processes (threads with ``in_process``), started on demand and
    reused."""

    def __init__(self, workers: int, *, in_process: bool = False) -> None:
        self._slots = asyncio.Semaphore(workers)
        self._idle: list[_Worker | _ThreadWorker] = []
        self._warming: asyncio.Task[None] | None = None
        self._in_process = in_process

    async def _start(self) -> _Worker | _ThreadWorker:
        return _ThreadWorker() if self._in_process else await _Worker.start()

    def warm(self) -> None:
        """Start a worker now, so the first pack does not wait for an interpreter to start."""

        async def start_one() -> None:
            self._idle.append(await self._start())

        self._warming = asyncio.get_running_loop().create_task(start_one())

    async def preflight(self, spec: PackSpec) -> PackPlan:
        reply = await self._ask({"kind": "preflight", "spec": spec.model_dump(mode="json")}, None)
        return PackPlan.model_validate(reply["plan"])

    async def scan(
        self, spec: PackSpec, cache_dir: Path, compare: dict[str, str] | None = None
    ) -> Scan:
        """Walk once: the plan, the content fingerprints, the files changed since ``compare``;
        the walk stays in the worker for :meth:`pack` to use."""
        token = secrets.token_hex(8)
        request = {
            "kind": "scan",
            "spec": spec.model_dump(mode="json"),
            "cache_dir": str(cache_dir),
            "compare": compare,
            "token": token,
        }
        chosen: list[_Worker | _ThreadWorker] = []
        reply = await self._ask(request, None, chosen=chosen)
        report = ScanReport.model_validate(reply["scan"])
        return Scan(report=report, spec=spec, token=token, worker=chosen[0])

    async def pack(
        self,
        spec: PackSpec,
        cache_dir: Path,
        progress: ProgressFn | None = None,
        scan: Scan | None = None,
    ) -> tuple[PackResult, float]:
        """Pack; with a fresh ``scan`` of the same spec, from its walk (the worker that holds
        it is asked when it is free; another one walks again)."""
        usable = scan is not None and scan.spec == spec and scan.fresh
        request = {
            "kind": "pack",
            "spec": spec.model_dump(mode="json"),
            "cache_dir": str(cache_dir),
            "scan": scan.token if usable and scan is not None else None,
        }
        prefer = scan.worker if usable and scan is not None else None
        reply = await self._ask(request, progress, prefer=prefer)
        return PackResult.model_validate(reply["result"]), float(reply["packed_at"])

    async def _ask(
        self,
        request: dict[str, Any],
        progress: ProgressFn | None,
        *,
        prefer: _Worker | _ThreadWorker | None = None,
        chosen: list[_Worker | _ThreadWorker] | None = None,
    ) -> dict[str, Any]:
        async with self._slots:
            if self._warming is not None:
                await self._warming
                self._warming = None
            if prefer is not None and prefer in self._idle:
                self._idle.remove(prefer)
                worker = prefer
            else:
                worker = self._idle.pop() if self._idle else await self._start()
            if chosen is not None:
                chosen.append(worker)
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
