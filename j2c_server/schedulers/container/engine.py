"""What the container engine is (rootless or not, podman or Docker), and what a user's settings
may not ask of a rootful one.

A rootful engine's socket is root on this machine: whoever reaches it can run a container as uid
0, on the host's network, with any host folder bound in. The settings are the user's own (their
``~/.jupyter/j2c.yaml`` overrides the system file), so before the first job a backend reads the
engine once — podman's ``GET /libpod/info`` says ``host.security.rootless``; Docker answers it
404, and its ``GET /info``'s ``SecurityOptions`` holds ``name=rootless`` for a rootless daemon —
and refuses, on a rootful
engine, ``user`` with uid 0, a ``network`` that joins a namespace not the job's own (``host``,
``ns:<path>``, ``container:<id>``: the machine's network, or another container's, perhaps another
tenant's job), any ``cap_add`` (a capability of root on the host) and a ``credentials_dir``
outside the user's home, unless the operator locked that setting (the system config owns it):
by what the setting means, not how it is spelt. These are guardrails: a
user who can reach a rootful socket can talk to it without j2c. Isolation between users on one
machine comes from one rootless podman per user (docs/operators.md, "Security model").
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from j2c_server.core.errors import ConfigError
from j2c_server.schedulers.container.api import EngineClient
from j2c_server.schedulers.container.settings import ContainerSettings

PREFIX = "scheduler.container."


@dataclass(frozen=True)
class EngineInfo:
    """What the backend needs to know of the engine behind the socket."""

    podman: bool
    rootless: bool


async def read_engine(api: EngineClient) -> EngineInfo:
    """Podman's ``GET /libpod/info``; Docker answers it 404, and then ``GET /info``. One of them
    only: each costs podman seconds on a loaded machine (it asks the package manager for the
    versions of its helpers at every call)."""
    libpod = await api.request("GET", "/libpod/info", allow=(400, 404, 405))
    if libpod.status_code == 200:
        security = (libpod.json().get("host") or {}).get("security") or {}
        return EngineInfo(podman=True, rootless=bool(security.get("rootless")))
    info = (await api.request("GET", "/info")).json()
    options = (info.get("SecurityOptions") or []) if isinstance(info, dict) else []
    return EngineInfo(podman=False, rootless=any("name=rootless" in str(o) for o in options))


def unsafe_settings(
    cfg: ContainerSettings,
    engine: EngineInfo,
    locked: Callable[[str], bool],
    home: Path | None = None,
) -> list[ConfigError]:
    """What the settings ask of a rootful engine that only the operator may grant (nothing on a
    rootless one: its root is the user). ``locked(key)``: the operator's config owns ``key``."""
    if engine.rootless:
        return []
    problems: list[ConfigError] = []
    why = "the container engine runs as root (a rootful socket is root on this machine)"
    hint = (
        "use a rootless podman of your own (podman system service as your user), or ask the "
        "operator to set and lock it in the system config"
    )
    uid = int(cfg.job_user().split(":")[0])
    if uid == 0 and not locked(PREFIX + "user"):
        problems.append(
            ConfigError(
                f"scheduler.container.user: {cfg.job_user()} runs jobs as root, and {why}",
                field=PREFIX + "user",
                hint=hint,
            )
        )
    joined = joined_namespace(cfg.network)
    if joined and not locked(PREFIX + "network"):
        problems.append(
            ConfigError(
                f"scheduler.container.network: {cfg.network} puts jobs on {joined}, and {why}",
                field=PREFIX + "network",
                hint=hint,
            )
        )
    if cfg.cap_add and not locked(PREFIX + "cap_add"):
        problems.append(
            ConfigError(
                f"scheduler.container.cap_add: {', '.join(cfg.cap_add)} would be root's "
                f"capabilities on this machine, and {why}",
                field=PREFIX + "cap_add",
                hint=hint,
            )
        )
    if cfg.credentials_dir and not locked(PREFIX + "credentials_dir"):
        folder = Path(os.path.realpath(Path(cfg.credentials_dir).expanduser()))
        mine = Path(os.path.realpath(home or Path.home()))
        if not folder.is_relative_to(mine):
            problems.append(
                ConfigError(
                    f"scheduler.container.credentials_dir: {folder} is not a folder inside "
                    f"your home ({mine}), and {why}",
                    field=PREFIX + "credentials_dir",
                    hint=hint,
                )
            )
    return problems


def joined_namespace(network: str | None) -> str | None:
    """What network namespace a ``NetworkMode`` joins that is not the job's own (None: it makes
    its own, or has none): ``host``, ``ns:<path>`` (any namespace by its path, the host's
    ``/proc/1/ns/net`` included), ``container:<id>`` (another container's)."""
    mode = (network or "").strip()
    kind, _, target = mode.partition(":")
    if mode.lower() == "host":
        return "this machine's network"
    if kind.lower() == "ns" and target:
        return f"the network namespace {target}"
    if kind.lower() == "container" and target:
        return f"the network of container {target}"
    return None


@dataclass(frozen=True)
class Access:
    """How the job's uid reaches its folders: ``U`` on its binds, and the user namespace."""

    chown_binds: bool = False
    userns: str | None = None


def job_access(job_uid: int, engine: EngineInfo | None) -> Access:
    """How the job's uid gets its folders (:mod:`.folders`); None: the engine is
    not known (a dry run)."""
    me = os.geteuid()
    if engine is None or me == 0:
        return Access()
    if job_uid == me:
        return Access(userns="keep-id" if engine.podman and engine.rootless else None)
    if engine.podman:
        return Access(chown_binds=True)
    return Access()
