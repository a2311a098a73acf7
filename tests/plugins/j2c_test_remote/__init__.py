"""A scheduler plug-in written the way the built-in backends are: it imports j2c's settings at
the top (``from j2c_server.config import J2CSettings``, as ``schedulers/slurm/backend.py``
does), and uses only the stable surface a plug-in may rely on (docs/architecture.md):
``SchedulerBase``, ``JobSpec``, ``LogLine``, ``SchedulerState``, the ``wire.api`` models it
returns, the errors of ``core.errors``, and its settings section read through
``settings.scheduler.section``.

Its jobs "run on other machines" (``remote = True``), so a private ``file://`` store is
refused for it like for Slurm. They really run, on this machine standing in for the far-away
site, which is enough for it to pass the behavioural contract every backend passes
(``tests/contract``): each job is a folder of ``<data dir>/remote`` named after the request's
key (so a second submit of the key finds it), started detached by :mod:`.runner` (so it
outlives the scheduler object), its output one file read from a byte-offset cursor.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from j2c_server.config import J2CSettings
from j2c_server.core.errors import Conflict, InvalidInput
from j2c_server.schedulers.base import JobSpec, LogLine, SchedulerBase, SchedulerState
from j2c_server.wire.api import Capabilities, JobHandle, JobResults, JobStatus

RUNNER = Path(__file__).with_name("runner.py")
CANCEL_GRACE_S = 5.0  # SIGTERM, then SIGKILL after this
POLL_S = 0.05


class RemoteSettings(BaseModel):
    """``scheduler.remote.*``"""

    model_config = ConfigDict(extra="forbid")

    site: str = "far-away"


class RemoteScheduler(SchedulerBase):
    name = "remote"
    settings_model = RemoteSettings
    capabilities = Capabilities(gpus=True)
    remote = True

    def __init__(self, settings: J2CSettings) -> None:
        self.site = settings.scheduler.section("remote", RemoteSettings).site
        self._runs = settings.data_path() / "remote"  # the far-away site's job folders

    async def submit(self, spec: JobSpec) -> JobHandle:
        if not spec.command:
            raise InvalidInput("command: nothing to run", field="command")
        run = self._runs / hashlib.sha256(spec.key.encode()).hexdigest()[:24]
        self._runs.mkdir(parents=True, exist_ok=True)
        try:
            run.mkdir()  # atomic: of two submits of one key, one creates the job
        except FileExistsError:
            return await self._adopt(run, spec)
        record = {**spec.model_dump(mode="json"), "grace": CANCEL_GRACE_S}
        (run / "spec.tmp").write_text(json.dumps(record))
        (run / "spec.tmp").replace(run / "spec.json")
        # The runner forks and returns at once; the job lives on without this process.
        await asyncio.to_thread(
            subprocess.run,
            [sys.executable, str(RUNNER), str(run)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=True,
            timeout=60,
        )
        return self._handle(run)

    async def _adopt(self, run: Path, spec: JobSpec) -> JobHandle:
        for _ in range(200):  # the creator writes spec.json right after the folder
            if (run / "spec.json").exists():
                break
            await asyncio.sleep(POLL_S)
        existing = json.loads((run / "spec.json").read_text())
        if existing["key"] != spec.key:
            raise Conflict(f"{run} holds another request's job", field="key")
        return self._handle(run)

    def _handle(self, run: Path) -> JobHandle:
        return JobHandle(
            scheduler=self.name, id=run.name, data={"site": self.site, "run": str(run)}
        )

    async def status(self, handle: JobHandle) -> SchedulerState:
        run = _run(handle)
        code = _exit_code(run)
        if code is not None:
            if (run / "cancel").exists():
                return SchedulerState(
                    status=JobStatus.cancelled, message="cancelled", exit_code=code
                )
            if code == 0:
                return SchedulerState(status=JobStatus.succeeded, exit_code=0)
            return SchedulerState(
                status=JobStatus.failed, message=f"exit code {code}", exit_code=code
            )
        runner = _pid(run / "runner.pid")
        if runner is None:
            return SchedulerState(status=JobStatus.submitted)
        if not _alive(runner):
            return SchedulerState(status=JobStatus.lost, message=f"the runner of {run} died")
        if (run / "cancel").exists():
            return SchedulerState(status=JobStatus.cancelling)
        started = (run / "child.pid").exists()
        return SchedulerState(status=JobStatus.running if started else JobStatus.queued)

    async def follow_logs(
        self, handle: JobHandle, cursor: str | None = None
    ) -> AsyncIterator[LogLine]:
        if cursor is not None and not cursor.isdigit():
            raise InvalidInput(f"cursor: {cursor!r} is not a byte offset", field="cursor")
        run = _run(handle)
        offset = int(cursor or 0)
        pending = b""
        while True:
            ended = _exit_code(run) is not None or (await self.status(handle)).status.terminal
            with open(run / "output.log", "ab+") as log:
                log.seek(offset + len(pending))
                pending += log.read()
            *lines, pending = pending.split(b"\n")
            for line in lines:
                offset += len(line) + 1
                yield LogLine(text=line.decode(errors="replace"), cursor=str(offset))
            if ended:
                if pending:
                    offset += len(pending)
                    yield LogLine(text=pending.decode(errors="replace"), cursor=str(offset))
                return
            if not lines:
                await asyncio.sleep(POLL_S)

    async def cancel(self, handle: JobHandle) -> None:
        run = _run(handle)
        if _exit_code(run) is not None:
            return  # finished: its outcome stays
        (run / "cancel").touch()  # the runner stops the job: SIGTERM, SIGKILL after the grace

    async def results(self, handle: JobHandle) -> JobResults:
        return JobResults(exit_code=_exit_code(_run(handle)))

    async def close(self) -> None:
        return None


def _run(handle: JobHandle) -> Path:
    run = handle.data.get("run")
    if not isinstance(run, str):
        raise InvalidInput("handle: a remote job handle needs its run folder", field="handle")
    return Path(run)


def _exit_code(run: Path) -> int | None:
    try:
        return int((run / "exit_code").read_text())
    except (OSError, ValueError):
        return None


def _pid(path: Path) -> int | None:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
