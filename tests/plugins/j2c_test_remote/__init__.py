"""A scheduler plug-in written the way the built-in backends are: it imports j2c's settings at
the top (``from j2c_server.config import J2CSettings``, as ``schedulers/slurm.py`` does), and
uses only the stable surface a plug-in may rely on (docs/architecture.md): ``SchedulerBase``,
``JobSpec``, ``LogLine``, ``SchedulerState``, the ``models`` it returns, and its settings
section read through ``settings.scheduler.section``.

Its jobs "run on other machines" (``remote = True``), so a private ``file://`` store is
refused for it like for Slurm. It runs nothing: a submitted job is at once finished, with one
log line, which is enough to check that the backend loads and answers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from pydantic import BaseModel, ConfigDict

from j2c_server.config import J2CSettings
from j2c_server.schedulers.base import JobSpec, LogLine, SchedulerBase, SchedulerState
from j2c_server.wire.api import Capabilities, JobHandle, JobResults, JobStatus


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

    async def submit(self, spec: JobSpec) -> JobHandle:
        return JobHandle(scheduler=self.name, id=spec.key, data={"site": self.site})

    async def status(self, handle: JobHandle) -> SchedulerState:
        return SchedulerState(status=JobStatus.succeeded, exit_code=0)

    async def follow_logs(
        self, handle: JobHandle, cursor: str | None = None
    ) -> AsyncIterator[LogLine]:
        if cursor is None:
            yield LogLine(text=f"ran at {handle.data['site']}", cursor="1")

    async def cancel(self, handle: JobHandle) -> None:
        return None

    async def results(self, handle: JobHandle) -> JobResults:
        return JobResults(exit_code=0)

    async def close(self) -> None:
        return None
