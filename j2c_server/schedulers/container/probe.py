"""``scheduler: container``: an image inventoried once through the engine, kept by image ID.

The probe is a short-lived container of the image running the image's own ``python3 -I -c
<unpack/inventory.py's source>``: no network (``NetworkMode: none``), as the job user, hardened
as a job is (every capability dropped, ``no-new-privileges``, a pids limit: the image is the
user's choice and its ``python3`` runs with what the probe has), bounded in time, removed
afterwards (labelled with the server's runs folder, so a server killed
mid-probe removes it at its next start: :func:`.lifecycle.sweep`). Its stdout is the inventory.
The engine's image ID is the key (:func:`container_key`): a tag moved to another build is
probed again, the same build under two tags once. Asking the engine for the ID is one API call
and starts nothing, so a preflight of a probed image starts no container. When to probe, and
keeping what a probe found, are the image check's (``image/check.py``).
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from j2c_server.config import J2CSettings
from j2c_server.core.errors import J2CError
from j2c_server.schedulers.container.api import EngineClient, LogCursor, LogReader
from j2c_server.schedulers.container.lifecycle import LABEL_RUNS, PROBE_PREFIX, runs_label
from j2c_server.schedulers.container.settings import ContainerSettings
from j2c_server.schedulers.container.spec import runs_root
from j2c_server.unpack import inventory as inventory_script

PROBE_TIMEOUT_S = 60.0
PROBE_PIDS = 256  # an inventory needs one process; a pids_limit of 0 (the engine's) gets this
PROBE_MEMORY = 512 * 1024 * 1024
# How many probe containers this process created: the tests count them.
probes_started = 0


class ProbeFailed(J2CError):
    """The image could not be inventoried (no python3, an engine error, too slow)."""

    status_code = 502
    code = "probe_failed"


def engine(settings: J2CSettings) -> EngineClient:
    """A client of the container backend's engine (the caller closes it)."""
    cfg = settings.scheduler.section("container", ContainerSettings)
    return EngineClient(cfg.socket_path(), cfg.api_version)


def _script() -> str:
    return Path(inventory_script.__file__).read_text()


async def image_id(client: EngineClient, image: str) -> str | None:
    """The engine's ID of ``image``; None when the engine has no such image."""
    response = await client.request("GET", f"/images/{quote(image, safe='')}/json", allow=(404,))
    if response.status_code == 404:
        return None
    return str(response.json()["Id"])


def probe_body(image: str, cfg: ContainerSettings, label: str) -> dict[str, Any]:
    return {
        "Image": image,
        "Entrypoint": ["python3"],
        "Cmd": ["-I", "-c", _script()],
        "User": cfg.job_user(),
        "Env": ["HOME=/tmp", "PYTHONDONTWRITEBYTECODE=1"],
        "WorkingDir": "/",
        "NetworkDisabled": True,
        "Labels": {"j2c.probe": "inventory", LABEL_RUNS: label},
        "HostConfig": {
            "NetworkMode": "none",
            "CapDrop": ["ALL"],
            "SecurityOpt": ["no-new-privileges"],
            "PidsLimit": cfg.pids_limit or PROBE_PIDS,
            "Memory": PROBE_MEMORY,
        },
    }


async def run_probe(
    client: EngineClient, image: str, cfg: ContainerSettings, timeout_s: float, label: str
) -> dict[str, Any]:
    """Run the inventory script in a fresh container of ``image``; its parsed output."""
    global probes_started
    name = f"{PROBE_PREFIX}{secrets.token_hex(6)}"
    await client.request(
        "POST", "/containers/create", params={"name": name}, json=probe_body(image, cfg, label)
    )
    probes_started += 1
    try:
        try:
            await client.request("POST", f"/containers/{name}/start", allow=(304,))
        except J2CError as exc:
            raise ProbeFailed(f"the probe of {image} could not start its python3: {exc}") from None
        try:
            waited = await client.request(
                "POST", f"/containers/{name}/wait", timeout=httpx.Timeout(timeout_s, connect=10.0)
            )
        except httpx.TimeoutException:
            raise ProbeFailed(f"the probe of {image} did not finish in {timeout_s:.0f} s") from None
        code = int(waited.json().get("StatusCode", -1))
        logs = await client.request(
            "GET", f"/containers/{name}/logs", params={"stdout": 1, "stderr": 1, "timestamps": 1}
        )
        reader = LogReader(LogCursor())
        lines = [*reader.feed(logs.content), *reader.finish()]
    finally:
        await client.request("DELETE", f"/containers/{name}", params={"force": 1}, allow=(404,))
    out = [line.text for line in lines if line.stream == "stdout"]
    err = " ".join(line.text for line in lines if line.stream == "stderr")[-300:]
    if code != 0 or not out:
        raise ProbeFailed(f"the probe of {image} exited with {code}: {err or 'no output'}")
    try:
        data: dict[str, Any] = json.loads(out[-1])
    except ValueError:
        raise ProbeFailed(f"the probe of {image} printed no inventory: {out[-1][:200]}") from None
    return data


def container_key(image_id: str) -> str:
    """The key of an engine's image ID (engines differ on the ``sha256:`` prefix)."""
    return f"container-id:{image_id.removeprefix('sha256:')}"


async def image_key(settings: J2CSettings, image: str) -> str | None:
    """The inventory key of ``image`` on this machine's engine: by its ID (a tag moved to a new
    build is a new image); None when the engine has no such image."""
    client = engine(settings)
    try:
        found = await image_id(client, image)
    finally:
        await client.aclose()
    return None if found is None else container_key(found)


async def probe(
    settings: J2CSettings, image: str, timeout_s: float = PROBE_TIMEOUT_S
) -> dict[str, Any] | None:
    """A new inventory of ``image`` from a probe container; None when ``probe_images`` is off."""
    cfg = settings.scheduler.section("container", ContainerSettings)
    if not cfg.probe_images:
        return None  # not known yet: the job's j2c-unpack checks and teaches it
    client = engine(settings)
    try:
        return await run_probe(client, image, cfg, timeout_s, runs_label(runs_root(settings)))
    finally:
        await client.aclose()


async def container_image_key(settings: J2CSettings, container: str) -> str | None:
    """The image key of a job's container (the ID it was created from); None when gone."""
    client = engine(settings)
    try:
        info = await client.inspect(container)
    finally:
        await client.aclose()
    if info is None or not info.get("Image"):
        return None
    return container_key(str(info["Image"]))
