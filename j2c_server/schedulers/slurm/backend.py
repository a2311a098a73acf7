"""The Slurm backend: batch jobs through slurmrestd (REST API v0.0.38, JWT auth) with httpx.

- submit: ``POST /job/submit`` with the script and description of :mod:`.job`. A retried
  submit first looks for a job whose comment carries the same key and adopts it.
- status: ``GET /job/{id}`` read by :mod:`.state`; a job Slurm has forgotten (purged after
  ``MinJobAge``) reads as lost.
- logs: slurmrestd has no log endpoint, so the job's output file is followed from a byte offset.
  This assumes what Slurm clusters have: ``scheduler.slurm.job_dir`` is a filesystem shared by
  the compute nodes and the machine j2c runs on.
- cancel: mark the job's comment, ``DELETE /job/{id}?signal=SIGTERM``, and after
  ``cancel_grace_s`` ``SIGKILL`` if it still runs (from a task of this scheduler: if the server
  stops first, the job keeps only its SIGTERM). A pending job is removed at once.
- arrays: ``submit_array`` submits a sweep as one array job (``array`` with a ``%`` throttle);
  each task has a handle ``<array id>_<task>`` with its own output file, read and cancelled as
  a job of its own (:mod:`.array`; a task's comment is not marked: the array shares it).

slurmrestd unreachable raises :class:`SchedulerUnavailable`; the watcher retries with backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import stat
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from j2c_server.config import J2CSettings
from j2c_server.core.errors import ConfigError, InvalidInput, J2CError, SchedulerError
from j2c_server.core.file_modes import private_dir
from j2c_server.schedulers.base import (
    InventoryTarget,
    JobSpec,
    LogLine,
    SchedulerBase,
    SchedulerState,
)
from j2c_server.schedulers.job_secrets import (
    job_secrets,
    remove_secrets_file,
    write_secrets_file,
)
from j2c_server.schedulers.logfile import follow_log_file, parse_cursor
from j2c_server.schedulers.slurm.array import (
    TASK_ENV,
    TASK_OUTPUT,
    array_field,
    split_task_id,
    task_handle_id,
    task_output,
    task_record,
)
from j2c_server.schedulers.slurm.job import (
    CANCEL_MARK,
    OUTPUT_NAME,
    RankLines,
    batch_script,
    check_spec,
    comment_fields,
    job_description,
    secrets_path,
)
from j2c_server.schedulers.slurm.rest import SlurmFailure, SlurmRest
from j2c_server.schedulers.slurm.settings import SlurmSettings
from j2c_server.schedulers.slurm.state import exit_code, job_state, jobs_ahead, place_words
from j2c_server.wire.api import Capabilities, JobHandle, JobResults, JobStatus

# How often a log follower asks whether the job has ended (the file itself is polled faster).
STATUS_POLL_S = 1.0
PLACE_REFRESH_S = 5.0  # a pending job's place in the queue, read again after this
_CANCEL_POLL_S = 0.25
# An array's tasks all poll its one list: read it at most this often for all of them.
ARRAY_REFRESH_S = 0.5
_TASK_ID_RE = re.compile(r"^\d+(?:_\d+)?$")
# Slurm error numbers: unknown job id; job cannot be signalled in its current state.
_INVALID_JOB_ID = 2017
_NOT_ALTERABLE = 2020
# Submit refusals that the request (not the configuration) causes: node or partition limits.
_REQUEST_UNSATISFIABLE = {2014, 2015}
_INVALID_PARTITION = 2000
log = logging.getLogger("j2c")


def _make_job_folder(run_dir: Path) -> None:
    """The job's own folder, 0700 (its script output and logs are the user's alone), in the
    shared ``job_dir`` (made with ordinary modes when missing: other users share it). A folder
    already there that is not this user's own (another user may have made it, with files the
    job would trust, in a ``job_dir`` every user can write) is refused, nothing submitted."""
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    if not run_dir.is_symlink():
        private_dir(run_dir)
    info = run_dir.lstat()
    if stat.S_ISLNK(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        what = "a symlink" if stat.S_ISLNK(info.st_mode) else f"owned by uid {info.st_uid}"
        raise SchedulerError(
            f"the job's run folder {run_dir} already exists and is not this user's alone "
            f"({what}, mode {stat.S_IMODE(info.st_mode):o}): nothing was submitted",
            hint="someone else made it in scheduler.slurm.job_dir; remove it, or give each "
            "user a job_dir only they can write",
        )


def _job_dir(settings: J2CSettings) -> Path:
    value = settings.scheduler.section("slurm", SlurmSettings).job_dir
    if not value:
        raise ConfigError(
            "scheduler.slurm.job_dir is not set (a folder shared by the compute nodes and this "
            "machine, for job output)",
            field="scheduler.slurm.job_dir",
        )
    path = Path(value).expanduser()
    if not path.is_absolute():
        raise ConfigError(
            f"scheduler.slurm.job_dir must be an absolute path, not {value!r}",
            field="scheduler.slurm.job_dir",
        )
    return path


def _slurm_id(handle: JobHandle) -> str:
    if not _TASK_ID_RE.match(handle.id):
        raise InvalidInput(f"{handle.id!r} is not a Slurm job id", field="handle")
    return handle.id


def _submit_error(exc: SlurmFailure, job: dict[str, Any]) -> J2CError:
    if _INVALID_PARTITION in exc.numbers:
        return ConfigError(
            f"Slurm has no partition {job.get('partition', '(default)')!r}: {exc.message}",
            field="scheduler.slurm.partition",
        )
    if _REQUEST_UNSATISFIABLE.intersection(exc.numbers):
        asked = ", ".join(
            f"{name}={job[name]}"
            for name in ("gres", "cpus_per_task", "memory_per_node", "time_limit", "partition")
            if name in job
        )
        return InvalidInput(
            f"no Slurm node can run this job ({asked or 'defaults'}): {exc.message}",
            field="resources",
            hint="ask for fewer GPUs, CPUs or memory, or a GPU type the cluster has",
        )
    return exc


class SlurmScheduler(SchedulerBase):
    """Runs ``JobSpec.command`` as a Slurm batch job; see the module docstring."""

    name = "slurm"
    settings_model = SlurmSettings
    capabilities = Capabilities(
        gpus=True,
        gpu_types=True,
        cpus=True,
        memory=True,
        time_limit=True,
        queues=True,
        multi_node=True,
        arrays=True,
    )
    remote = True
    array_index_env = TASK_ENV

    @classmethod
    def inventory_target(cls, settings: J2CSettings, image: str | None) -> InventoryTarget:
        """With ``container_runtime: none`` the job runs on the nodes' own Python: the
        partition's (``slurm:<url>#<partition>``); else the image, as any backend's."""
        slurm = settings.scheduler.section("slurm", SlurmSettings)
        if slurm.container_runtime == "none":
            partition = slurm.partition or "default"
            return InventoryTarget(
                cls.name, f"slurm:{slurm.url or '-'}#{partition}", f"slurm partition {partition}"
            )
        target = super().inventory_target(settings, image)
        assert target is not None
        return target

    def __init__(self, settings: J2CSettings, *, environ: Mapping[str, str] | None = None) -> None:
        self._slurm = settings.scheduler.section("slurm", SlurmSettings)
        self._job_dir = _job_dir(settings)
        self._rest = SlurmRest(self._slurm, environ)
        self._submit_lock = asyncio.Lock()
        self._escalations: set[asyncio.Task[None]] = set()
        self._places: dict[str, tuple[float, str | None]] = {}  # Slurm id -> (when, place)
        self._arrays: dict[str, tuple[float, list[dict[str, Any]]]] = {}  # id -> (when, tasks)

    # ------------------------------------------------------------------ protocol

    async def submit(self, spec: JobSpec) -> JobHandle:
        # A resumed job's later attempt writes a log of its own (its watcher starts afresh).
        folder = spec.job_id if spec.attempt == 1 else f"{spec.job_id}.a{spec.attempt}"
        output = self._job_dir / folder / OUTPUT_NAME
        job_id, existing = await self._submit(spec, output, None)
        if existing is not None:
            return self._handle(existing)
        data: dict[str, Any] = {"output": str(output)}
        if spec.resources.nodes > 1:
            data["nodes"] = spec.resources.nodes
        return JobHandle(scheduler=self.name, id=job_id, data=data)

    async def submit_array(
        self, spec: JobSpec, size: int, max_parallel: int | None
    ) -> list[JobHandle]:
        """One array job of ``size`` tasks running ``spec`` (whose command picks its row by
        :data:`TASK_ENV`); one handle per task, in task order."""
        if spec.resources.nodes > 1:
            raise InvalidInput(
                "a Slurm array runs single-node tasks; this sweep asks for "
                f"{spec.resources.nodes} nodes per variant",
                field="resources.nodes",
            )
        run_dir = self._job_dir / spec.job_id
        job_id, existing = await self._submit(
            spec, run_dir / TASK_OUTPUT, array_field(size, max_parallel)
        )
        if existing is not None:
            job_id = str(existing.get("array_job_id") or existing["job_id"])
        return [
            JobHandle(
                scheduler=self.name,
                id=task_handle_id(job_id, task),
                data={"output": str(task_output(run_dir, task)), "array": job_id},
            )
            for task in range(size)
        ]

    async def _submit(
        self, spec: JobSpec, output: Path, array: str | None
    ) -> tuple[str, dict[str, Any] | None]:
        """The new job's id, or the job this key already made (a retried submit adopts it)."""
        check_spec(spec)
        run_dir = output.parent
        job = job_description(spec, self._slurm, output)
        if array is not None:
            job["array"] = array
        script = batch_script(spec, self._slurm, run_dir)
        # One submit at a time: two retries of one key in this process never both create a job.
        async with self._submit_lock:
            existing = await self._find(spec.key)
            if existing is not None:
                return str(existing["job_id"]), existing
            await asyncio.to_thread(_make_job_folder, run_dir)
            _, secret = job_secrets(spec, self._slurm.env)
            if secret:  # by reference: slurmctld keeps the job's environment and shows it
                await asyncio.to_thread(write_secrets_file, secrets_path(run_dir), secret)
            try:
                answer = await self._rest.request(
                    "POST", "/job/submit", json_body={"job": job, "script": script}
                )
            except SlurmFailure as exc:
                raise _submit_error(exc, job) from None
        job_id = answer.get("job_id")
        if not isinstance(job_id, int):
            raise SchedulerError("slurmrestd accepted the job but returned no job id")
        return str(job_id), None

    async def status(self, handle: JobHandle) -> SchedulerState:
        job = await self._job(_slurm_id(handle))
        if job is None and (gone := await self._task_gone(handle.id)) is not None:
            return gone
        if job is None:
            return SchedulerState(
                status=JobStatus.lost,
                message=f"Slurm no longer knows job {handle.id} (it forgets finished jobs after "
                f"MinJobAge); its output stays in {handle.data.get('output', 'the job folder')}",
            )
        state = job_state(job)
        if state.status != JobStatus.queued:
            self._places.pop(str(job.get("job_id")), None)
        elif place := await self._place(job):
            state = state.model_copy(update={"message": f"{state.message}; {place}"})
        return state

    async def _place(self, job: dict[str, Any]) -> str | None:
        """A pending job's place in its partition's queue, from the job list (read at most
        every :data:`PLACE_REFRESH_S` per job: on a big cluster the list is large)."""
        slurm_id, now = str(job.get("job_id")), time.monotonic()
        kept = self._places.get(slurm_id)
        if kept is not None and now - kept[0] < PLACE_REFRESH_S:
            return kept[1]
        try:
            listed = (await self._rest.get("/jobs")).get("jobs") or []
        except SlurmFailure as exc:
            log.debug("j2c: no queue place for Slurm job %s: %s", slurm_id, exc)
            return None
        ahead = jobs_ahead(job, [other for other in listed if isinstance(other, dict)])
        place = None if ahead is None else place_words(ahead, str(job.get("partition") or ""))
        self._places[slurm_id] = (now, place)
        return place

    def follow_logs(self, handle: JobHandle, cursor: str | None = None) -> AsyncIterator[LogLine]:
        _slurm_id(handle)
        parse_cursor(cursor)  # a bad cursor fails here, not at the first line
        return self._follow(handle, cursor)

    async def cancel(self, handle: JobHandle) -> None:
        slurm_id = _slurm_id(handle)
        job = await self._job(slurm_id)
        if job is None:
            return
        state = job_state(job)
        if state.status.terminal:
            return
        comment = str(job.get("comment") or "")
        is_task = split_task_id(slurm_id)[1] is not None
        if not is_task and CANCEL_MARK not in comment.split():
            await self._rest.request(
                "POST", f"/job/{slurm_id}", json_body={"comment": f"{comment} {CANCEL_MARK}"}
            )
        if state.status != JobStatus.running:
            await self._remove(slurm_id)
            return
        try:
            await self._rest.request("DELETE", f"/job/{slurm_id}", params={"signal": "SIGTERM"})
        except SlurmFailure as exc:
            if _NOT_ALTERABLE not in exc.numbers:  # it went back to pending meanwhile
                raise
            await self._remove(slurm_id)
            return
        task = asyncio.create_task(self._kill_after_grace(slurm_id), name=f"j2c-kill-{slurm_id}")
        self._escalations.add(task)
        task.add_done_callback(self._escalations.discard)

    async def results(self, handle: JobHandle) -> JobResults:
        job = await self._job(_slurm_id(handle))
        if job is None or not job_state(job).status.terminal:
            return JobResults()
        output = handle.data.get("output")
        if isinstance(output, str) and "array" not in handle.data:
            # Ended: its credentials file has served (an array's waits for its last task).
            await asyncio.to_thread(remove_secrets_file, secrets_path(Path(output).parent))
        return JobResults(exit_code=exit_code(job))

    async def close(self) -> None:
        for task in list(self._escalations):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._rest.close()

    # ------------------------------------------------------------------ helpers

    async def _job(self, slurm_id: str) -> dict[str, Any] | None:
        """The job's record (an array task's: see :mod:`.array`), or None when Slurm
        does not know the id."""
        array_id, task = split_task_id(slurm_id)
        if task is not None:
            return task_record(await self._array(array_id), task)
        try:
            body = await self._rest.get(f"/job/{slurm_id}")
        except SlurmFailure as exc:
            if _INVALID_JOB_ID in exc.numbers:
                return None
            raise
        jobs = body.get("jobs") or []
        return jobs[0] if jobs and isinstance(jobs[0], dict) else None

    async def _array(self, array_id: str) -> list[dict[str, Any]]:
        """The records of an array's tasks, read once per :data:`ARRAY_REFRESH_S` for all."""
        now = time.monotonic()
        kept = self._arrays.get(array_id)
        if kept is not None and now - kept[0] < ARRAY_REFRESH_S:
            return kept[1]
        try:
            body = await self._rest.get(f"/job/{array_id}")
        except SlurmFailure as exc:
            if _INVALID_JOB_ID not in exc.numbers:
                raise
            body = {}
        tasks = [job for job in body.get("jobs") or [] if isinstance(job, dict)]
        # Keep only arrays read lately: a long-running server sees many sweeps.
        self._arrays = {k: v for k, v in self._arrays.items() if now - v[0] < 60.0}
        self._arrays[array_id] = (now, tasks)
        return tasks

    async def _task_gone(self, slurm_id: str) -> SchedulerState | None:
        """An array task its still-known array no longer lists: removed before it started."""
        array_id, task = split_task_id(slurm_id)
        if task is None or not await self._array(array_id):
            return None
        return SchedulerState(
            status=JobStatus.cancelled,
            message=f"Slurm array task {slurm_id} was removed from the queue before it started",
        )

    async def _find(self, key: str) -> dict[str, Any] | None:
        """The newest job Slurm still knows that this Slurm user submitted with ``key`` (a
        job of another user's with the same key in its comment is theirs: never adopted)."""
        body = await self._rest.get("/jobs")
        user = await self._rest.user()
        matches = [
            job
            for job in body.get("jobs") or []
            if isinstance(job, dict)
            and comment_fields(job.get("comment")).get("key") == key
            and job.get("user_name") == user
        ]
        return max(matches, key=lambda job: int(job.get("job_id") or 0), default=None)

    def _handle(self, job: dict[str, Any]) -> JobHandle:
        return JobHandle(
            scheduler=self.name,
            id=str(job["job_id"]),
            data={"output": str(job.get("standard_output") or "")},
        )

    async def _remove(self, slurm_id: str) -> None:
        """Slurm's own cancel: a pending job leaves the queue at once."""
        try:
            await self._rest.request("DELETE", f"/job/{slurm_id}")
        except SlurmFailure as exc:
            if _INVALID_JOB_ID not in exc.numbers:
                raise

    async def _kill_after_grace(self, slurm_id: str) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._slurm.cancel_grace_s
        try:
            while loop.time() < deadline:
                await asyncio.sleep(min(_CANCEL_POLL_S, max(0.0, deadline - loop.time())))
                job = await self._job(slurm_id)
                if job is None or job_state(job).status.terminal:
                    return
            await self._rest.request("DELETE", f"/job/{slurm_id}", params={"signal": "SIGKILL"})
        except J2CError as exc:
            log.warning("j2c: could not kill Slurm job %s after its grace: %s", slurm_id, exc)

    async def _follow(self, handle: JobHandle, cursor: str | None) -> AsyncIterator[LogLine]:
        output = handle.data.get("output")
        if not output:
            raise SchedulerError(f"the handle of Slurm job {handle.id} names no output file")
        path = Path(output)
        ranked = int(handle.data.get("nodes", 1)) > 1
        watch = _EndWatch()
        poller = asyncio.create_task(watch.poll(self, handle))
        delivered = False
        pieces = RankLines()  # srun --label: each line starts with its rank, long ones cut
        last = None
        try:
            async for line in follow_log_file(path, cursor, watch.ended):
                delivered = True
                last = line
                if ranked:
                    whole = pieces.feed(line.text)
                    if whole is None:
                        continue
                    line = replace(line, rank=whole[0], text=whole[1])
                yield line
            for rank, text in pieces.rest():
                if last is not None:
                    yield replace(last, rank=rank, text=text)
        finally:
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller
        if watch.started and not delivered and not await asyncio.to_thread(path.exists):
            log.warning(
                "j2c: Slurm job %s ran but its output %s is not visible here: is "
                "scheduler.slurm.job_dir on a filesystem shared with the compute nodes?",
                handle.id,
                path,
            )


class _EndWatch:
    """Polls the job's status on the event loop; ``ended`` (called from the log reader's worker
    thread) reports the result, or raises the poll's failure (e.g. slurmrestd unreachable)."""

    def __init__(self) -> None:
        self.started = False  # seen running: it had a chance to write output
        self._ended = False
        self._failure: Exception | None = None

    async def poll(self, scheduler: SlurmScheduler, handle: JobHandle) -> None:
        try:
            while True:
                state = await scheduler.status(handle)
                self.started = self.started or state.status == JobStatus.running
                if state.status.terminal:
                    ran = state.status in (JobStatus.succeeded, JobStatus.failed)
                    self.started = self.started or ran
                    self._ended = True
                    return
                await asyncio.sleep(STATUS_POLL_S)
        except Exception as exc:  # any failure ends the follow; the caller sees it
            self._failure = exc

    def ended(self) -> bool:
        if self._failure is not None:
            raise self._failure
        return self._ended
