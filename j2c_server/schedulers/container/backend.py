"""The ``container`` backend: one container per job on this machine's engine (podman or Docker).

Through the Docker Engine API on a unix socket (:mod:`.api`), never a CLI:

- submit: ``POST /containers/create?name=j2c-<key hash>`` with :func:`render_create`, then start
  it. A 409 adopts the existing container when its ``j2c.io/key`` label is this request's key (a
  retried submit, or one that died between create and start), and refuses otherwise. A job that
  asks for GPUs waits for them in the machine-wide ledger first (:mod:`.gpus`).
- status: the container's state (:mod:`.status`); once collected, the state recorded then
  (:mod:`.lifecycle`); a container the engine no longer has otherwise is ``lost`` (or
  ``cancelled``, after a cancel). Everything it needs is in the handle, the job's folder and on
  the engine, so a restarted server re-attaches by name. Reading it also enforces the time limit.
- logs: ``/logs?follow=1&timestamps=1`` from a timestamp cursor, re-opened when the stream drops
  and drained with one plain read once the container has exited (:mod:`.logs`).
- cancel: a marker in the job's folder, then ``POST /stop?t=<grace>`` (the engine sends SIGTERM,
  then SIGKILL after the grace).
- results: the exit code, and the files of the job's ``$J2C_OUTPUT_DIR`` (a host folder,
  :mod:`.status`); then
  the terminal state is written to the job's folder and the container removed (unless
  ``keep_finished``).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from j2c_server.config import J2CSettings
from j2c_server.core.errors import (
    ConfigError,
    Conflict,
    InvalidInput,
    J2CError,
    SchedulerError,
)
from j2c_server.schedulers.base import (
    InventoryTarget,
    JobSpec,
    LogLine,
    SchedulerBase,
    SchedulerState,
    no_image,
)
from j2c_server.schedulers.container import probe
from j2c_server.schedulers.container.api import EngineClient, parse_timestamp
from j2c_server.schedulers.container.engine import (
    Access,
    EngineInfo,
    job_access,
    read_engine,
    unsafe_settings,
)
from j2c_server.schedulers.container.folders import (
    cache_folder,
    give_file,
    prepare,
    prepare_cache,
)
from j2c_server.schedulers.container.gpus import GpuWaiter
from j2c_server.schedulers.container.lifecycle import (
    mark_timed_out,
    past_limit,
    record_final,
    recorded_final,
    remove,
    runs_label,
    sweep,
    timed_out,
)
from j2c_server.schedulers.container.logs import follow_container_logs
from j2c_server.schedulers.container.ranks import (
    check_ranks,
    combined_state,
    ended_badly,
    make_network,
    rank_names,
    remove_network,
)
from j2c_server.schedulers.container.settings import ContainerSettings
from j2c_server.schedulers.container.spec import (
    LABEL_KEY,
    SECRETS_NAME,
    job_folder,
    network_name,
    output_upload_dir,
    parse_user,
    rank_folder,
    render_create,
    runs_root,
    store_files,
)
from j2c_server.schedulers.container.status import (
    CANCELLED,
    FINISHED,
    collect_results,
    container_state,
    mark_cancelled,
    read_end,
    state_of,
)
from j2c_server.schedulers.job_secrets import job_secrets, remove_secrets_file, write_secrets_file
from j2c_server.schedulers.multinode import follow_ranks
from j2c_server.wire.api import Capabilities, JobHandle, JobResults, JobStatus, Resources

__all__ = ["ContainerScheduler", "render_create"]

log = logging.getLogger("j2c")


class ContainerScheduler(SchedulerBase):
    """See the module docstring."""

    name = "container"
    settings_model = ContainerSettings
    capabilities = Capabilities(gpus=True, cpus=True, memory=True, time_limit=True, multi_node=True)

    @classmethod
    def native_spec(cls, spec: JobSpec, settings: J2CSettings) -> dict[str, Any] | None:
        """The engine's create request for ``spec``."""
        return render_dry_run(spec, settings)

    @classmethod
    def check_resources(cls, resources: Resources) -> None:
        check_ranks(resources)

    @classmethod
    async def image_problem(cls, settings: J2CSettings, image: str | None) -> J2CError | None:
        """No image at all, or one this machine's engine does not have (one API call; an
        engine that cannot be reached is the submit's to say)."""
        image = image or settings.lab_image()
        if not image:
            return no_image()
        try:
            found = await probe.image_key(settings, image)
        except (J2CError, ValueError):
            return None
        if found is not None:
            return None
        return InvalidInput(
            f"image: the container engine has no image {image!r}",
            field="image",
            hint="build or pull it on this machine (podman images lists what it has), or "
            "choose another",
        )

    @classmethod
    def inventory_target(cls, settings: J2CSettings, image: str | None) -> InventoryTarget:
        """The image, whose inventory is kept by the engine's image ID (:mod:`.probe`)."""
        return InventoryTarget(
            cls.name, f"image:{image or '-'}", f"image {image or '(none)'}", image
        )

    @classmethod
    async def inventory_key(cls, settings: J2CSettings, target: InventoryTarget) -> str | None:
        if not target.image:
            return target.key
        return await probe.image_key(settings, target.image)

    @classmethod
    async def probe_inventory(
        cls, settings: J2CSettings, target: InventoryTarget
    ) -> dict[str, Any] | None:
        return None if not target.image else await probe.probe(settings, target.image)

    @classmethod
    async def job_inventory_key(
        cls, settings: J2CSettings, target: InventoryTarget, handle: JobHandle
    ) -> str | None:
        """The ID of the image the job's container was created from (a tag may have moved)."""
        return await probe.container_image_key(settings, handle.id)

    @classmethod
    def store_problem(cls, settings: J2CSettings, url: str) -> str | None:
        """On this machine, but as the job's uid: a private store is read by its owner only."""
        user = settings.scheduler.section("container", ContainerSettings).job_user()
        uid = int(user.split(":")[0])
        if uid == os.getuid():
            return None
        # Root's own uid is no way out: a rootful engine refuses jobs as uid 0 (engine.py).
        own_uid = "" if os.getuid() == 0 else ", or scheduler.container.user to your own uid"
        return (
            f"storage.url: {url} is private to this user (uid {os.getuid()}), but container "
            f"jobs run as uid {uid} and cannot read it; set storage.shared: true (its objects "
            f"become readable by other users){own_uid}"
        )

    def __init__(self, settings: J2CSettings) -> None:
        self._settings = settings
        self._cfg = settings.scheduler.section("container", ContainerSettings)
        self._engine: EngineClient | None = None
        self._gpus = GpuWaiter(settings)
        self._swept = False
        self._engine_info: EngineInfo | None = None
        self._engine_lock = asyncio.Lock()

    async def _ready(self) -> EngineClient:
        """The engine, once this server's collected containers left on it were removed (after
        a restart: see :mod:`.lifecycle`)."""
        api = self._api()
        if not self._swept and not self._cfg.keep_finished:
            self._swept = True
            root = runs_root(self._settings)
            try:
                removed = await sweep(api, runs_label(root), root)
            except (SchedulerError, ValueError) as exc:
                self._swept = False  # tried again at the next call
                log.warning("j2c: removing finished containers left on the engine: %s", exc)
            else:
                if removed:
                    log.info("j2c: removed %d finished container(s) left behind", len(removed))
        return api

    def _api(self) -> EngineClient:
        if self._engine is None:
            self._engine = EngineClient(self._cfg.socket_path(), self._cfg.api_version)
        return self._engine

    # ------------------------------------------------------------------ protocol

    async def engine(self) -> EngineInfo:
        """The engine (rootless or not), read once, however many submits ask at the same time
        (the others wait for that one answer); settings a rootful engine may not run
        (:mod:`.engine`) are refused here, before any job of this server starts."""
        async with self._engine_lock:
            if self._engine_info is None:
                info = await read_engine(self._api())
                problems = unsafe_settings(self._cfg, info, self._locked)
                if problems:
                    raise problems[0]
                self._engine_info = info
        return self._engine_info

    def _locked(self, key: str) -> bool:
        return _locked(self._settings, key)

    @classmethod
    async def preflight_problems(cls, settings: J2CSettings) -> list[tuple[str, str]]:
        """What :meth:`engine` would refuse; nothing when the engine cannot be reached (the
        submit says so)."""
        cfg = settings.scheduler.section("container", ContainerSettings)
        try:
            api = EngineClient(cfg.socket_path(), cfg.api_version)
        except ConfigError:
            return []
        try:
            info = await read_engine(api)
        except (SchedulerError, ValueError):
            return []
        finally:
            await api.aclose()
        problems = unsafe_settings(cfg, info, lambda key: _locked(settings, key))
        return [(problem.field or "scheduler.container", str(problem)) for problem in problems]

    async def submit(self, spec: JobSpec) -> JobHandle:
        files = await asyncio.to_thread(store_files, spec, self._settings)
        render_create(spec, self._settings, gpu_devices=[], files=files)  # bad input: say so first
        check_ranks(spec.resources)
        engine = await self.engine()
        access = job_access(parse_user(self._cfg.job_user())[0], engine)
        folder = job_folder(self._settings, spec.key)
        cache = await asyncio.to_thread(self._prepare_folders, spec, folder, access)
        request = render_create(
            spec, self._settings, gpu_devices=[], files=files, cache=cache, access=access
        )
        name = request["name"]
        handle = JobHandle(scheduler=self.name, id=name, data={"folder": str(folder)})
        if spec.resources.nodes > 1:
            handle.data["nodes"] = spec.resources.nodes
            if await asyncio.to_thread(recorded_final, folder) is None:
                await self._submit_ranks(spec, files, cache, access)
            return handle
        existing = await (await self._ready()).inspect(name)
        if existing is not None:
            self._check_owner(existing, spec, name)
        elif await asyncio.to_thread(recorded_final, folder) is not None:
            return handle  # it ran and was collected (then removed): nothing to start again
        elif spec.resources.gpus:
            # The GPU waiter creates and starts the container once the ledger grants GPUs.
            await asyncio.to_thread(self._gpus.start, spec, folder, request)
            return handle
        else:
            existing = await self._create(spec, request)
        handle.data["id"] = existing.get("Id")
        if state_of(existing) in ("created", "configured"):
            await self._api().request("POST", f"/containers/{name}/start", allow=(304,))
        return handle

    async def status(self, handle: JobHandle) -> SchedulerState:
        folder = self._folder(handle)
        api = await self._ready()
        nodes = int(handle.data.get("nodes", 1))
        if nodes > 1:
            return await self._rank_status(handle, folder, nodes)
        info = await api.inspect(handle.id)
        cancelled = await asyncio.to_thread((folder / CANCELLED).exists)
        if info is None:
            final = await asyncio.to_thread(recorded_final, folder)
            if final is not None:
                return final  # collected, then removed
            waiting = await asyncio.to_thread(self._gpus.waiting, folder)
            if waiting is not None:
                return SchedulerState(status=JobStatus.queued, message=waiting)
            if cancelled:
                return SchedulerState(status=JobStatus.cancelled, message="cancelled")
            reason = await asyncio.to_thread(self._gpus.failure, folder)
            if reason is not None:
                return SchedulerState(status=JobStatus.lost, message=reason)
            return SchedulerState(
                status=JobStatus.lost,
                message=f"container {handle.id} no longer exists (removed outside j2c, or the "
                "engine's storage was reset)",
                interrupted="its container vanished without a cancel",
            )
        limit = None if cancelled or state_of(info) in FINISHED else past_limit(info)
        if limit is not None:
            await asyncio.to_thread(mark_timed_out, folder, limit)
            await self._stop(handle.id)
            info = await api.inspect(handle.id) or info
        stopped_at = await asyncio.to_thread(timed_out, folder)
        end = await asyncio.to_thread(read_end, folder / "outputs")
        return container_state(
            info, cancelled=cancelled, timed_out_s=stopped_at, end=end, judge_end=True
        )

    async def follow_logs(
        self, handle: JobHandle, cursor: str | None = None
    ) -> AsyncIterator[LogLine]:
        folder = self._folder(handle)
        nodes = int(handle.data.get("nodes", 1))
        names = rank_names(handle.id, nodes)

        def follow(rank: int, at: str | None) -> AsyncIterator[LogLine]:
            poll = self._cfg.poll_interval_s
            return follow_container_logs(self._api, names[rank], folder, self._gpus, poll, at)

        lines = follow(0, cursor) if nodes == 1 else follow_ranks(follow, nodes, cursor)
        async for line in lines:
            yield line

    async def cancel(self, handle: JobHandle) -> None:
        folder = self._folder(handle)
        await asyncio.to_thread(mark_cancelled, folder)
        await asyncio.to_thread(self._gpus.cancel, folder)
        names = rank_names(handle.id, int(handle.data.get("nodes", 1)))
        await asyncio.gather(*(self._end(name) for name in names))

    async def _end(self, name: str) -> None:
        """A container not started yet removed, a running one stopped (a cancel's)."""
        info = await self._api().inspect(name)
        if info is None:
            return
        state = state_of(info)
        if state in ("created", "configured"):
            await self._api().request(
                "DELETE", f"/containers/{name}", params={"force": "1"}, allow=(404,)
            )
        elif state not in FINISHED:
            await self._stop(name)

    async def _stop(self, name: str) -> None:
        grace = self._cfg.cancel_grace_s
        # The engine sends SIGTERM and SIGKILL after t seconds; it answers once it stopped.
        await self._api().request(
            "POST",
            f"/containers/{name}/stop",
            params={"t": str(int(grace))},
            allow=(304, 404),
            timeout=httpx.Timeout(grace + 60.0, connect=10.0),
        )

    async def results(self, handle: JobHandle) -> JobResults:
        """The exit code and outputs; a finished container is then recorded and removed (the
        results stage reads it last, after the watch drained its log)."""
        folder = self._folder(handle)
        if int(handle.data.get("nodes", 1)) > 1:
            return await self._rank_results(handle, folder)
        info = await self._api().inspect(handle.id)
        if info is None:
            final = await asyncio.to_thread(recorded_final, folder)
            code = final.exit_code if final is not None else None
            return await asyncio.to_thread(collect_results, folder / "outputs", code)
        if state_of(info) not in FINISHED:
            return await asyncio.to_thread(collect_results, folder / "outputs", None)
        cancelled = await asyncio.to_thread((folder / CANCELLED).exists)
        stopped_at = await asyncio.to_thread(timed_out, folder)
        final = container_state(info, cancelled=cancelled, timed_out_s=stopped_at)
        results = await asyncio.to_thread(collect_results, folder / "outputs", final.exit_code)
        await asyncio.to_thread(record_final, folder, final)
        await asyncio.to_thread(remove_secrets_file, folder / "secrets" / SECRETS_NAME)
        if not self._cfg.keep_finished:
            await remove(self._api(), handle.id)
        return results

    async def close(self) -> None:
        if self._engine is not None:
            await self._engine.aclose()
            self._engine = None

    # ------------------------------------------------------------------ multi-node (ranks.py)

    async def _submit_ranks(
        self, spec: JobSpec, files: list[Path], cache: Path | None, access: Access
    ) -> None:
        """Every rank created, then every one started; all or none (ranks.py)."""
        api = await self._ready()
        network = None if self._cfg.network else network_name(spec.key)
        if network is not None:
            await make_network(api, network, spec.key, runs_label(runs_root(self._settings)))
        folder = job_folder(self._settings, spec.key)
        made: list[str] = []
        try:
            infos = []
            for rank in range(spec.resources.nodes):
                if rank:  # rank 0's folders are the job's own, made with them
                    own = rank_folder(folder, rank)
                    await asyncio.to_thread(
                        prepare, [own / "home"], [own / "outputs"], self._cfg, access
                    )
                request = render_create(
                    spec,
                    self._settings,
                    gpu_devices=[],
                    files=files,
                    cache=cache,
                    access=access,
                    rank=rank,
                )
                infos.append(await self._create(spec, request))
                made.append(request["name"])
            for name, info in zip(made, infos, strict=True):
                if state_of(info) in ("created", "configured"):
                    await api.request("POST", f"/containers/{name}/start", allow=(304,))
        except BaseException:
            for name in made:
                await api.request(
                    "DELETE", f"/containers/{name}", params={"force": "1"}, allow=(404,)
                )
            if network is not None:
                await remove_network(api, network)
            raise

    async def _rank_status(self, handle: JobHandle, folder: Path, nodes: int) -> SchedulerState:
        final = await asyncio.to_thread(recorded_final, folder)
        if final is not None:
            return final  # collected, then removed
        api = self._api()
        names = rank_names(handle.id, nodes)
        infos = list(await asyncio.gather(*(api.inspect(name) for name in names)))
        cancelled = await asyncio.to_thread((folder / CANCELLED).exists)
        missing = [name for name, info in zip(names, infos, strict=True) if info is None]
        if missing:
            if cancelled:
                return SchedulerState(status=JobStatus.cancelled, message="cancelled")
            return SchedulerState(
                status=JobStatus.lost,
                message=f"container {missing[0]} no longer exists (removed outside j2c, or the "
                "engine's storage was reset)",
            )
        found = [info for info in infos if info is not None]
        limit = None if cancelled else past_limit(found[0])
        if limit is not None:
            await asyncio.to_thread(mark_timed_out, folder, limit)
        if limit is not None or (not cancelled and ended_badly(found)):
            # One rank failed or the time is up: the others would wait for it forever.
            await asyncio.gather(*(self._end(name) for name in names))
            found = [info or {} for info in await asyncio.gather(*map(api.inspect, names))]
        stopped_at = await asyncio.to_thread(timed_out, folder)
        ends = [
            await asyncio.to_thread(read_end, rank_folder(folder, rank) / "outputs")
            for rank in range(nodes)
        ]
        states = [
            container_state(i, cancelled=cancelled, timed_out_s=stopped_at, end=e, judge_end=True)
            for i, e in zip(found, ends, strict=True)
        ]
        ended = [
            parse_timestamp(str((info.get("State") or {}).get("FinishedAt") or ""))
            if state.status.terminal
            else None
            for info, state in zip(found, states, strict=True)
        ]
        return _interrupted_first(combined_state(states, ended), states, ended)

    async def _rank_results(self, handle: JobHandle, folder: Path) -> JobResults:
        state = await self._rank_status(handle, folder, int(handle.data["nodes"]))
        results = await asyncio.to_thread(collect_results, folder / "outputs", state.exit_code)
        if not state.status.terminal or await asyncio.to_thread(recorded_final, folder) is not None:
            return results
        await asyncio.to_thread(record_final, folder, state)
        if not self._cfg.keep_finished:
            for name in rank_names(handle.id, int(handle.data["nodes"])):
                await remove(self._api(), name)
            if not self._cfg.network:
                await remove_network(self._api(), handle.id + "-net")
        return results

    # ------------------------------------------------------------------ helpers

    def _folder(self, handle: JobHandle) -> Path:
        if handle.scheduler != self.name:
            raise InvalidInput(f"not a container job: {handle.scheduler!r}", field="handle")
        if not handle.id.startswith("j2c-") or not handle.id[4:].isalnum():
            raise InvalidInput(f"not a container job name: {handle.id!r}", field="handle")
        folder = handle.data.get("folder")
        return Path(folder) if isinstance(folder, str) else runs_root(self._settings) / handle.id

    def _prepare_folders(self, spec: JobSpec, folder: Path, access: Access) -> Path | None:
        """The job's HOME, outputs, store upload folder and cache, given to its uid
        (:mod:`.folders`); the cache folder, or None when there is none."""
        folder.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        folder.mkdir(exist_ok=True, mode=0o700)
        folder.chmod(0o700)
        upload = output_upload_dir(spec, self._settings)
        readable = [folder / "outputs", *([upload] if upload is not None else [])]
        prepare([folder / "home"], readable, self._cfg, access)
        _, secret = job_secrets(spec, self._cfg.env)
        if secret:  # by reference: the create request is kept and shown by the engine
            prepare([folder / "secrets"], [], self._cfg, access)
            path = folder / "secrets" / SECRETS_NAME
            write_secrets_file(path, secret)
            give_file(path, self._cfg, access)
        wanted = cache_folder(self._settings)
        return None if wanted is None else prepare_cache(wanted, self._cfg, access)

    async def _create(self, spec: JobSpec, request: dict[str, Any]) -> dict[str, Any]:
        name = request["name"]
        response = await self._api().request(
            "POST",
            "/containers/create",
            params={"name": name},
            json=request["body"],
            allow=(404, 409),
        )
        if response.status_code == 404:
            image = request["body"]["Image"]
            raise InvalidInput(
                f"image: the container engine has no image {image!r}",
                field="image",
                hint="build or pull it on this machine (podman images lists what it has)",
            )
        info = await self._api().inspect(name)
        if info is None:
            raise SchedulerError(f"container {name} vanished right after it was created")
        if response.status_code == 409:
            self._check_owner(info, spec, name)
        return info

    @staticmethod
    def _check_owner(info: dict[str, Any], spec: JobSpec, name: str) -> None:
        labels = (info.get("Config") or {}).get("Labels") or {}
        if labels.get(LABEL_KEY) != spec.key:
            raise Conflict(
                f"a container named {name} already exists and was not created for this request",
                field="key",
                hint=f"remove it (podman rm {name}), or submit with a different request",
            )


def _interrupted_first(
    combined: SchedulerState, states: list[SchedulerState], ended: list[int | None]
) -> SchedulerState:
    """A multi-node job is interrupted when the rank that failed first was (the others were
    stopped because of it)."""
    if combined.status != JobStatus.failed:
        return combined
    order = sorted(range(len(states)), key=lambda rank: (ended[rank] or 0, rank))
    first = next((states[rank] for rank in order if states[rank].status == JobStatus.failed), None)
    if first is None or first.interrupted is None:
        return combined
    return combined.model_copy(update={"interrupted": first.interrupted})


def _locked(settings: J2CSettings, key: str) -> bool:
    # The operator's locked settings (core/config_locks.py): their value is the operator's.
    return settings.is_locked(key)


def render_dry_run(spec: JobSpec, settings: J2CSettings) -> dict[str, Any]:
    """What ``--dry-run`` prints: the create request, its name and path."""
    files = store_files(spec, settings)
    request = render_create(spec, settings, files=files, cache=cache_folder(settings))
    return {
        "method": "POST",
        "path": f"/{settings.scheduler.section('container', ContainerSettings).api_version}"
        "/containers/create"
        f"?name={request['name']}",
        "body": request["body"],
    }
