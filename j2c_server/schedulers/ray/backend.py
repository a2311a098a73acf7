"""The Ray backend: one Ray job per j2c job through the dashboard's Jobs REST API (httpx; no
``ray`` import here).

- submit: ``POST /api/jobs/`` with ``entrypoint`` = ``exec j2c-unpack …`` (:func:`entrypoint`)
  and no ``runtime_env`` upload (the layers come from the store; only ``env_vars``, and
  ``image_uri`` in ``image_mode: image_uri``). Every client of the dashboard reads a job's
  entrypoint, runtime_env and metadata (``GET /api/jobs/``), so no credential goes there: a
  job's secret env (a pass_env value, a presigned manifest, the outputs upload policy) is a
  0600 file in the user's folder of ``scheduler.ray.secrets_dir`` (:func:`secrets_file`),
  named by ``$J2C_SECRETS_FILE``, removed once the job's results are read; without that
  setting such a job is refused. ``submission_id`` is derived from the job key:
  a retried submit is answered "already exists" and adopts that job. GPUs, CPUs and memory become
  ``entrypoint_num_gpus/num_cpus/memory`` (they decide which node runs the entrypoint: the head
  unless they place it on a worker); a GPU type asks for ``accelerator_type:<type>``.
- status: ``GET /api/jobs/{id}``; a job Ray no longer knows reads as lost.
- **interrupted** (a new attempt may resume the job, docs/pipeline.md): Ray says its job
  supervisor actor died (``error_type`` ``JOB_SUPERVISOR_ACTOR_DIED``, or, from a Ray without
  ``error_type``, a message that says so): the node that ran the entrypoint died or was
  stopped. A job Ray no longer knows (its head restarted) too. The entrypoint's own exit code
  (``JOB_ENTRYPOINT_COMMAND_ERROR``) and a stop j2c asked for are not.
- logs: the dashboard's tail websocket, read incrementally, with a cursor that counts the lines
  already delivered (:mod:`.logs`: Ray's own lines counted, not delivered).
- cancel: ``POST /api/jobs/{id}/stop`` (Ray sends SIGTERM, then SIGKILL after
  ``RAY_JOB_STOP_WAIT_TIME_S``).
- results: the exit code; outputs come through the outputs index ``j2c-unpack`` uploads.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import shlex
import stat
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

from j2c_server.config import J2CSettings
from j2c_server.core.errors import ConfigError, InvalidInput, J2CError, SchedulerError
from j2c_server.schedulers.base import JobSpec, LogLine, SchedulerBase, SchedulerState
from j2c_server.schedulers.job_secrets import (
    SECRETS_FILE_ENV,
    job_secrets,
    remove_secrets_file,
    write_secrets_file,
)
from j2c_server.schedulers.ray.logs import follow_lines
from j2c_server.schedulers.ray.rest import RayFailure, RayRest
from j2c_server.schedulers.ray.settings import RaySettings
from j2c_server.schedulers.unpack_cache import CACHE_ENV, CACHE_MAX_ENV, tenant_name
from j2c_server.wire.api import Capabilities, JobHandle, JobResults, JobStatus

_STATES = {
    "PENDING": JobStatus.queued,
    "RUNNING": JobStatus.running,
    "STOPPED": JobStatus.cancelled,
    "SUCCEEDED": JobStatus.succeeded,
    "FAILED": JobStatus.failed,
}
_SUPERVISOR_DIED = "Job supervisor actor died"  # Ray's words, before error_type existed
_MEMORY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)(i?)B?$")
_SUBMISSION_ID = re.compile(r"^j2c-[0-9a-f]{24}$")
# Ray's logger, as in "2026-01-02 03:04:05,678\tINFO job_manager.py:581 -- Runtime env is …".
# A GPU-type resource is present once per node: a fraction asks for the node, not the amount.
_TYPE_SHARE = 0.001


def submission_id(key: str) -> str:
    """Ray's id for the job of ``key``: the same key always gives the same id."""
    return "j2c-" + hashlib.sha256(key.encode()).hexdigest()[:24]


def memory_bytes(memory: str) -> int:
    match = _MEMORY.match(memory.strip())
    if not match:
        raise InvalidInput(
            f"resources.memory: {memory!r} is not a memory size (e.g. '16Gi', '8G', '512Mi')",
            field="resources.memory",
        )
    number, unit, binary = match.groups()
    power = " KMGT".index(unit or " ")
    return int(float(number) * (1024 if binary else 1000) ** power)


def _image_runtime_env(spec: JobSpec, ray: RaySettings, settings: J2CSettings) -> dict[str, Any]:
    """What the job's image means on Ray (docs/ray.md): the cluster's own, or image_uri."""
    if not spec.image:
        return {}
    if ray.image_mode == "image_uri":
        return {"image_uri": spec.image}
    # The lab's own image is what a job gets by default: it is not a request for another one.
    if spec.image in (ray.image, settings.lab_image()) and ray.image in (None, spec.image):
        return {}
    raise InvalidInput(
        f"image: the Ray cluster runs its jobs in its own image "
        f"({ray.image or 'scheduler.ray.image is not set'}), not {spec.image!r}",
        field="image",
        hint="send without an image, or ask the operator for scheduler.ray.image_mode: "
        "image_uri (nodes that run containers)",
    )


def job_body(spec: JobSpec, settings: J2CSettings) -> dict[str, Any]:
    """The ``POST /api/jobs/`` body of ``spec`` (also its ``--dry-run`` document)."""
    ray = settings.scheduler.section("ray", RaySettings)
    if not spec.command:
        raise InvalidInput("the job has no command to run", field="command")
    resources = spec.resources
    if resources.time_limit_minutes is not None:
        raise InvalidInput(
            "resources.time_limit_minutes: Ray jobs have no wall-clock limit",
            field="resources.time_limit_minutes",
            hint="leave it empty on Ray, or choose a scheduler with time limits",
        )
    env, secret = job_secrets(spec, ray.env)
    env.update(J2C_JOB_ID=spec.job_id, PYTHONUNBUFFERED="1")
    if secret:
        env[SECRETS_FILE_ENV] = str(secrets_file(ray, spec.key, secret))
    if ray.cache_dir:
        # One folder per user: users who share a uid do not share entries (unpack_cache.py).
        env[CACHE_ENV] = f"{ray.cache_dir.rstrip('/')}/{tenant_name()}"
        if ray.cache_max:
            env[CACHE_MAX_ENV] = ray.cache_max
    body: dict[str, Any] = {
        "entrypoint": entrypoint(spec.command),
        "submission_id": submission_id(spec.key),
        "metadata": {
            "j2c_job_id": spec.job_id,
            "j2c_key": spec.key,
            "j2c_name": spec.name,
            "j2c_user": tenant_name(),
        },
        "runtime_env": {"env_vars": env, **_image_runtime_env(spec, ray, settings)},
    }
    if resources.gpus:
        body["entrypoint_num_gpus"] = resources.gpus
    if resources.cpus is not None:
        body["entrypoint_num_cpus"] = resources.cpus
    if resources.memory is not None:
        body["entrypoint_memory"] = memory_bytes(resources.memory)
    if resources.gpu_type:
        name = ray.gpu_type_resource.replace("{gpu_type}", resources.gpu_type)
        body["entrypoint_resources"] = {name: _TYPE_SHARE}
    return body


def secrets_file(ray: RaySettings, key: str, secret: Mapping[str, str]) -> Path:
    """Where the job of ``key`` finds its credentials: ``<secrets_dir>/<user>/<submission id>.json``
    (ConfigError naming ``scheduler.ray.secrets_dir`` when it is not set)."""
    if not ray.secrets_dir:
        raise ConfigError(
            f"the job carries credentials ({', '.join(sorted(secret))}), Ray shows every job's "
            "runtime_env and entrypoint to every client of its dashboard, and "
            "scheduler.ray.secrets_dir (where the job would read them from) is not set",
            field="scheduler.ray.secrets_dir",
            hint="set scheduler.ray.secrets_dir to a folder the Ray nodes read at the same "
            "path (the job reads its credentials from a 0600 file there), or send the job "
            "without them",
        )
    return Path(ray.secrets_dir) / tenant_name() / f"{submission_id(key)}.json"


def _write_secrets(path: Path, secret: Mapping[str, str]) -> None:
    """The job's credentials file, in the user's own folder (0700; one that is not this user's
    own, or is open to others, is refused: another user could read or swap the file)."""
    folder = path.parent
    folder.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o700)
    info = folder.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        raise ConfigError(
            f"scheduler.ray.secrets_dir: {folder} is not a folder of this user's own, closed to "
            "others (mode 0700)",
            field="scheduler.ray.secrets_dir",
        )
    write_secrets_file(path, secret)


def entrypoint(command: list[str]) -> str:
    """The shell line Ray runs: ``exec`` makes the command itself the process Ray started.

    Ray runs the line under ``/bin/sh -c`` and, to stop a job, signals that process and the
    children it has at that instant. dash forks a plain command rather than replacing itself,
    so a stop that came while the job waited for resources (Ray applies it as the job starts)
    could signal the shell before its child existed: the shell died and the orphaned command
    ran on (user code included) until Ray's watcher killed its group, seconds later.
    """
    return "exec " + shlex.join(command)


def job_state(job: Mapping[str, Any]) -> SchedulerState:
    raw = str(job.get("status") or "")
    status = _STATES.get(raw)
    if status is None:
        return SchedulerState(status=JobStatus.lost, message=f"Ray reports status {raw!r}")
    code = job.get("driver_exit_code")
    exit_code = code if isinstance(code, int) else None
    message = job.get("message") if status != JobStatus.succeeded else None
    if status == JobStatus.queued:
        message = message or "waiting for a node with the requested resources"
    if status == JobStatus.failed and exit_code is None:
        # It never ran (e.g. its runtime_env failed): say why, in Ray's words.
        message = f"Ray could not run the job: {job.get('message') or 'no reason given'}"
    text = str(message)[:2000] if message else None
    interrupted = None
    if status == JobStatus.failed and (
        job.get("error_type") == "JOB_SUPERVISOR_ACTOR_DIED"
        or (job.get("error_type") is None and _SUPERVISOR_DIED in str(job.get("message") or ""))
    ):
        interrupted = "its Ray node died (the job's supervisor actor died with it)"
    return SchedulerState(status=status, message=text, exit_code=exit_code, interrupted=interrupted)


def _ray_id(handle: JobHandle) -> str:
    if not _SUBMISSION_ID.match(handle.id):
        raise InvalidInput(f"{handle.id!r} is not a j2c Ray submission id", field="handle")
    return handle.id


def _cursor(cursor: str | None) -> int:
    if cursor is None or cursor == "":
        return 0
    if not cursor.isdigit():
        raise InvalidInput(f"log cursor {cursor!r} is not a line count", field="cursor")
    return int(cursor)


class RayScheduler(SchedulerBase):
    """Runs ``JobSpec.command`` as a Ray job's entrypoint; see the module docstring."""

    name = "ray"
    settings_model = RaySettings
    # One entrypoint process on one node (it may start Ray tasks of its own); no queues.
    capabilities = Capabilities(gpus=True, gpu_types=True, cpus=True, memory=True, multi_node=False)
    remote = True

    def __init__(self, settings: J2CSettings, *, environ: Mapping[str, str] | None = None) -> None:
        self._settings = settings
        self._ray = settings.scheduler.section("ray", RaySettings)
        self._rest = RayRest(self._ray, environ)

    @classmethod
    def native_spec(cls, spec: JobSpec, settings: J2CSettings) -> dict[str, Any] | None:
        return job_body(spec, settings)

    @classmethod
    async def preflight_problems(cls, settings: J2CSettings) -> list[tuple[str, str]]:
        try:
            rest = RayRest(settings.scheduler.section("ray", RaySettings))
        except ConfigError as exc:
            return [(exc.field or "scheduler.ray", exc.message)]
        try:
            await rest.request("GET", "/api/version")
        except J2CError as exc:
            return [("scheduler.ray.address", exc.message)]
        finally:
            await rest.close()
        return []

    @classmethod
    async def preflight_notes(cls, settings: J2CSettings) -> list[tuple[str, str]]:
        """On a cluster that runs other users' jobs (or jobs that name no j2c user), what it exposes
        of this user's job. Nothing when it cannot be read (submit says why)."""
        ray = settings.scheduler.section("ray", RaySettings)
        try:
            rest = RayRest(ray)
        except ConfigError:
            return []
        try:
            jobs = await rest.list_jobs()
        except J2CError:
            return []
        finally:
            await rest.close()
        me = tenant_name()
        users = {str((job.get("metadata") or {}).get("j2c_user") or "") for job in jobs}
        others = sorted(users - {me, ""})
        if not others and "" not in users:
            return []
        unknown = ["jobs of senders it does not name"] if "" in users else []
        who = ", ".join([*(f"{name}'s jobs" for name in others[:5]), *unknown])
        return [
            (
                "scheduler.ray.address",
                f"the Ray cluster at {ray.address} is shared (it also runs {who}): whoever "
                "holds its token reads every job's entrypoint, runtime_env, metadata and log, "
                "and can stop or delete any job; every job runs as the nodes' one worker uid, "
                "which reads the others' files and processes there. j2c sends no credential "
                "into the job's spec (scheduler.ray.secrets_dir), but your job's log, outputs "
                "and code are theirs to read: one Ray cluster per trust group",
            )
        ]

    # ------------------------------------------------------------------ protocol

    async def submit(self, spec: JobSpec) -> JobHandle:
        body = job_body(spec, self._settings)
        ray_id = body["submission_id"]
        _, secret = job_secrets(spec, self._ray.env)
        if secret:
            path = secrets_file(self._ray, spec.key, secret)
            await asyncio.to_thread(_write_secrets, path, secret)
        try:
            await self._rest.request("POST", "/api/jobs/", json_body=body)
        except RayFailure as exc:
            if "already exists" not in exc.text:
                raise _submit_error(exc, body) from None
            # The retry of a submit that reached Ray: adopt that job (same key, same id).
            job = await self._job(ray_id)
            if job is None or (job.get("metadata") or {}).get("j2c_key") != spec.key:
                raise SchedulerError(
                    f"Ray has a job {ray_id} that is not this job's ({exc.message})"
                ) from None
        return JobHandle(scheduler=self.name, id=ray_id, data={"job_id": spec.job_id})

    async def status(self, handle: JobHandle) -> SchedulerState:
        job = await self._job(_ray_id(handle))
        if job is None:
            return SchedulerState(
                status=JobStatus.lost,
                message=f"Ray no longer knows job {handle.id} (its head was restarted, or the "
                "job was deleted)",
                interrupted="the Ray cluster lost it (its head restarted)",
            )
        return job_state(job)

    def follow_logs(self, handle: JobHandle, cursor: str | None = None) -> AsyncIterator[LogLine]:
        ray_id = _ray_id(handle)
        return self._follow(handle, ray_id, _cursor(cursor))

    async def cancel(self, handle: JobHandle) -> None:
        ray_id = _ray_id(handle)
        try:
            await self._rest.request("POST", f"/api/jobs/{ray_id}/stop")
        except RayFailure as exc:
            if exc.status != 404:
                raise

    async def results(self, handle: JobHandle) -> JobResults:
        job = await self._job(_ray_id(handle))
        if job is None:
            return JobResults()
        state = job_state(job)
        if not state.status.terminal:
            return JobResults()
        if self._ray.secrets_dir:  # its credentials file has served
            path = Path(self._ray.secrets_dir) / tenant_name() / f"{handle.id}.json"
            await asyncio.to_thread(remove_secrets_file, path)
        return JobResults(exit_code=state.exit_code)

    async def close(self) -> None:
        await self._rest.close()

    # ------------------------------------------------------------------ helpers

    async def _job(self, ray_id: str) -> dict[str, Any] | None:
        try:
            return await self._rest.request("GET", f"/api/jobs/{ray_id}")
        except RayFailure as exc:
            if exc.status == 404:
                return None
            raise

    async def _follow(self, handle: JobHandle, ray_id: str, done: int) -> AsyncIterator[LogLine]:
        """Lines from the tail websocket while the job runs; once its status is terminal (read
        every ``poll_interval_s``: Ray's tail closes only seconds later), the rest from one read
        of the whole log."""
        job = await self._job(ray_id)
        if job is None:
            return
        entrypoint = str(job.get("entrypoint") or "")
        live = follow_lines(self._rest.tail(ray_id), ray_id, entrypoint, done)
        ended = asyncio.create_task(self._until_ended(ray_id))
        try:
            while not job_state(job).status.terminal:
                line = asyncio.ensure_future(anext(live))
                await asyncio.wait({line, ended}, return_when=asyncio.FIRST_COMPLETED)
                if not line.done():
                    line.cancel()
                    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                        await line
                    break
                try:
                    item = line.result()
                except StopAsyncIteration:
                    break
                done = int(item.cursor)
                yield item
        finally:
            ended.cancel()
            await live.aclose()
        answer = await self._rest.request("GET", f"/api/jobs/{ray_id}/logs")
        rest = follow_lines(_one(str(answer.get("logs") or "")), ray_id, entrypoint, done)
        async for item in rest:
            yield item

    async def _until_ended(self, ray_id: str) -> None:
        while True:
            job = await self._job(ray_id)
            if job is None or job_state(job).status.terminal:
                return
            await asyncio.sleep(self._ray.poll_interval_s)


async def _one(text: str) -> AsyncIterator[str]:
    yield text


def _submit_error(exc: RayFailure, body: dict[str, Any]) -> J2CError:
    if exc.status == 400 or "ValueError" in exc.text:
        asked = ", ".join(
            f"{name}={body[name]}"
            for name in (
                "entrypoint_num_gpus",
                "entrypoint_num_cpus",
                "entrypoint_memory",
                "entrypoint_resources",
            )
            if name in body
        )
        return InvalidInput(
            f"Ray refused the job ({asked or 'no resources asked'}): {exc.message}",
            field="resources",
        )
    return exc
