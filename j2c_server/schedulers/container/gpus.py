"""GPUs for container jobs: a detached waiter per GPU job, in this machine's GPU ledger.

A GPU claim in the ledger (:mod:`j2c_server.schedulers.gpu_ledger`) lives as long as the
process that made it, so a GPU job gets a waiter process
(``python -m j2c_server.schedulers.container.gpus FOLDER``) that is nobody's child: it holds
``FOLDER/job.lock`` for its whole life, waits in line for the GPUs (writing why in
``FOLDER/gpus.json``), creates and starts the container with the granted devices, waits for
it to exit and then frees them. Local and container jobs share one ledger, so they never get the
same GPU. A cancel while waiting (the ``cancelled`` marker) ends the waiter without a container.

Standard library plus httpx: the waiter talks to the engine on its own.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from j2c_server.config import J2CSettings
from j2c_server.core.errors import SchedulerError
from j2c_server.schedulers.base import JobSpec
from j2c_server.schedulers.container.settings import ContainerSettings
from j2c_server.schedulers.container.spec import render_create, store_files
from j2c_server.schedulers.gpu_ledger import GpuLedger, Grant, detect_gpu_ids, waiting_message
from j2c_server.schedulers.state_files import is_held, read_json, write_json_atomic

_REQUEST = "gpu-request.json"
_STATE = "gpus.json"
_LOCK = "job.lock"
_POLL_S = 0.5


def _ledger(request: dict[str, Any]) -> GpuLedger:
    return GpuLedger(Path(request["ledger"]))


def _try_acquire(ledger: GpuLedger, request: dict[str, Any]) -> Grant:
    return ledger.try_acquire(request["job_id"], request["count"], request["devices"])


class GpuWaiter:
    """The scheduler's side: start a waiter, and read what it says."""

    def __init__(self, settings: J2CSettings) -> None:
        self._settings = settings

    def start(self, spec: JobSpec, folder: Path, request: dict[str, Any] | None = None) -> None:
        """A waiter that creates ``request`` (default: rendered here) once GPUs are granted."""
        cfg = self._settings.scheduler.section("container", ContainerSettings)
        if is_held(folder / _LOCK) or (folder / _STATE).exists():
            return  # a retried submit: the first one's waiter is on it
        devices = detect_gpu_ids(cfg.gpus, os.environ)
        if spec.resources.gpus > len(devices):
            from j2c_server.core.errors import InvalidInput

            raise InvalidInput(
                f"the job asks for {spec.resources.gpus} GPU(s) but this machine has "
                f"{len(devices)}",
                field="resources.gpus",
                hint="ask for fewer, or set scheduler.container.gpus if detection missed some",
            )
        ledger = self._settings.scheduler.gpu_ledger  # the machine's pool, shared with local
        if request is None:
            files = store_files(spec, self._settings)
            request = render_create(spec, self._settings, gpu_devices=[], files=files)
        write_json_atomic(
            folder / _REQUEST,
            {
                "socket": cfg.socket_path(),
                "api_version": cfg.api_version,
                "name": request["name"],
                "body": request["body"],
                "job_id": spec.job_id,
                "count": spec.resources.gpus,
                "devices": devices,
                "gpu_mode": cfg.gpu_mode,
                "cdi_kind": cfg.cdi_kind,
                "ledger": ledger,
            },
        )
        write_json_atomic(folder / _STATE, {"state": "queued", "message": "waiting for GPUs"})
        lock_fd = os.open(folder / _LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            # Held before the waiter exists and handed over, so it never looks dead at start.
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
            with open(folder / "gpu-waiter.log", "ab") as log:
                launcher = subprocess.Popen(
                    [sys.executable, "-m", __name__, str(folder), str(lock_fd)],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    pass_fds=(lock_fd,),
                )
            if launcher.wait() != 0:
                raise SchedulerError("the GPU waiter of a container job failed to start")
        finally:
            os.close(lock_fd)

    def waiting(self, folder: Path) -> str | None:
        """Why the job has no container yet, while its waiter waits; None otherwise."""
        state = read_json(folder / _STATE)
        if state is None or state.get("state") != "queued" or not is_held(folder / _LOCK):
            return None
        return str(state.get("message") or "waiting for GPUs")

    def failure(self, folder: Path) -> str | None:
        state = read_json(folder / _STATE) or {}
        return str(state["message"]) if state.get("state") == "failed" else None

    def cancel(self, folder: Path) -> None:
        """Nothing to do: the waiter reads the cancel marker."""


# ---------------------------------------------------------------- the waiter process


def _devices(request: dict[str, Any], granted: list[str]) -> dict[str, Any]:
    if request["gpu_mode"] == "cdi":
        return {
            "Devices": [
                {
                    "PathOnHost": f"{request['cdi_kind']}={gpu}",
                    "PathInContainer": "",
                    "CgroupPermissions": "",
                }
                for gpu in granted
            ]
        }
    return {
        "DeviceRequests": [{"Driver": "nvidia", "DeviceIDs": granted, "Capabilities": [["gpu"]]}]
    }


def _run(folder: Path) -> None:
    request = read_json(folder / _REQUEST) or {}
    ledger = _ledger(request)
    count = request["count"]
    granted: list[str] | None = None
    try:
        while granted is None:
            if (folder / "cancelled").exists():
                write_json_atomic(folder / _STATE, {"state": "cancelled"})
                return
            grant = _try_acquire(ledger, request)
            granted = None if grant.devices is None else list(grant.devices)
            if granted is None:
                message = waiting_message(count, grant)
                write_json_atomic(folder / _STATE, {"state": "queued", "message": message})
                time.sleep(_POLL_S)
        body = dict(request["body"])
        body["HostConfig"] = {**body["HostConfig"], **_devices(request, granted)}
        prefix = f"/{request['api_version']}/containers"
        name = request["name"]
        transport = httpx.HTTPTransport(uds=request["socket"])
        with httpx.Client(transport=transport, base_url="http://engine", timeout=60.0) as client:
            created = client.post(f"{prefix}/create", params={"name": name}, json=body)
            if created.status_code not in (201, 409):
                message = f"the container engine refused the container: {created.text[:500]}"
                write_json_atomic(folder / _STATE, {"state": "failed", "message": message})
                return
            client.post(f"{prefix}/{name}/start")
            write_json_atomic(folder / _STATE, {"state": "started", "gpus": granted})
            while True:  # until it has exited or is gone, whatever happens to one connection
                with contextlib.suppress(httpx.TransportError):
                    reply = client.post(f"{prefix}/{name}/wait", timeout=None)
                    if reply.status_code in (200, 404):
                        return
                time.sleep(_POLL_S)
    finally:
        if granted is not None or request:
            ledger.release()


def main(argv: list[str] | None = None) -> None:
    folder, lock_fd = argv if argv is not None else sys.argv[1:]
    if os.fork() > 0:  # detach: the scheduler reaps the launcher, init adopts the waiter
        os._exit(0)
    os.set_inheritable(int(lock_fd), False)
    _run(Path(folder))


if __name__ == "__main__":
    main()
