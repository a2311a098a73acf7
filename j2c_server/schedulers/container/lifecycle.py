"""A container job's life after it runs: its terminal state kept, its container removed, its
wall-clock limit enforced, and what a restarted server left behind cleaned up.

- **Removed once collected.** The results stage is the last to read a container (after the watch
  drained its log): the backend then writes the terminal state (status, message, exit code) to
  ``<job folder>/final.json`` and removes the container, unless ``keep_finished``. From then on
  status and results are read from that file, so a removed container never reads ``lost``.
- **Swept after a restart.** A container (a multi-node job's network too) is labelled with its
  server's runs folder (hashed); at its first use a scheduler removes the exited ones of its own
  label whose job's ``final.json`` exists (collected, then not removed: a crash or an engine
  that did not answer). Nothing else on a shared engine is touched, and a job whose results were
  never collected keeps its container.
- **Time limit.** ``min(resources.time_limit_minutes, scheduler.container.time_limit_minutes)``
  travels as a label. Whenever the job's status is read past it (every second while a watcher
  follows the job, and at once when a restarted server re-attaches), a ``timed-out`` marker is
  written and the engine stops the container (SIGTERM, SIGKILL after ``cancel_grace_s``); the job
  then reads ``failed``, "timed out after N min", as the other backends report it.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from pathlib import Path
from typing import Any

from j2c_server.schedulers.base import JobSpec, SchedulerState
from j2c_server.schedulers.container.api import EngineClient, parse_timestamp
from j2c_server.schedulers.container.settings import ContainerSettings
from j2c_server.schedulers.state_files import read_json, write_json_atomic, write_record

LABEL_RUNS = "j2c.io/runs"
LABEL_TIME_LIMIT = "j2c.io/time-limit-s"
FINAL = "final.json"
TIMED_OUT = "timed-out"
_FINISHED = ("exited", "stopped", "dead")
# A job's container (rank 0: its folder's name) or a multi-node job's rank k.
_JOB_CONTAINER = re.compile(r"^(j2c-[0-9a-f]{20})(?:-r\d+)?$")


# Image probes (probe.py) carry the runs label too, so a server that was killed while one ran
# removes it at its next start. A probe is bounded in time; past this it is nobody's.
PROBE_PREFIX = "j2c-probe-"
PROBE_ORPHAN_S = 300.0


def runs_label(runs_root: Path) -> str:
    """Which server's runs folder a container belongs to (a hash: no host path in a label)."""
    return hashlib.sha256(str(runs_root).encode()).hexdigest()[:16]


def time_limit_s(spec: JobSpec, cfg: ContainerSettings) -> float | None:
    """The job's wall-clock limit: the request's, capped by the operator's."""
    minutes = [m for m in (spec.resources.time_limit_minutes, cfg.time_limit_minutes) if m]
    return min(minutes) * 60 if minutes else None


def labels(info: dict[str, Any]) -> dict[str, str]:
    return dict((info.get("Config") or {}).get("Labels") or {})


def past_limit(info: dict[str, Any], now: float | None = None) -> float | None:
    """The limit (s) a running container has run past, else None."""
    try:
        limit = float(labels(info).get(LABEL_TIME_LIMIT) or 0)
    except ValueError:
        return None
    started = parse_timestamp(str((info.get("State") or {}).get("StartedAt") or ""))
    if limit <= 0 or not started or started <= 0:
        return None
    elapsed = (time.time() if now is None else now) - started / 1e9
    return limit if elapsed >= limit else None


def mark_timed_out(folder: Path, limit_s: float) -> None:
    write_json_atomic(folder / TIMED_OUT, {"limit_s": limit_s})


def timed_out(folder: Path) -> float | None:
    """The limit (s) the job was stopped at, when it was."""
    marker = read_json(folder / TIMED_OUT)
    return float(marker["limit_s"]) if marker and "limit_s" in marker else None


def record_final(folder: Path, state: SchedulerState) -> None:
    """Written before the container is removed, waiting for space on a full disk (the
    container is not removed without it: see ``state_files.write_record``)."""
    write_record(folder / FINAL, state.model_dump(mode="json"))


def recorded_final(folder: Path) -> SchedulerState | None:
    """The terminal state written when the container was collected."""
    try:
        data = read_json(folder / FINAL)
        return SchedulerState.model_validate(data) if data else None
    except (OSError, ValueError):
        return None


async def remove(api: EngineClient, name: str) -> None:
    """Remove a finished container (and its anonymous volumes); gone already is fine."""
    await api.request("DELETE", f"/containers/{name}", params={"v": "1"}, allow=(404, 409))


async def sweep(api: EngineClient, label: str, runs_root: Path) -> list[str]:
    """Remove this server's collected containers that were left on the engine; their names."""
    filters = {"label": [f"{LABEL_RUNS}={label}"]}  # states filtered here: engines differ
    listed = await api.request(
        "GET", "/containers/json", params={"all": "1", "filters": json.dumps(filters)}
    )
    removed = []
    for entry in listed.json():
        names = [str(n).lstrip("/") for n in entry.get("Names") or []]
        if (entry.get("Labels") or {}).get(LABEL_RUNS) != label:
            continue
        probe = next((n for n in names if n.startswith(PROBE_PREFIX)), None)
        if probe is not None and _orphaned_probe(entry):
            await api.request("DELETE", f"/containers/{probe}", params={"force": 1}, allow=(404,))
            removed.append(probe)
            continue
        name = next((n for n in names if _JOB_CONTAINER.match(n)), None)
        if name is None or str(entry.get("State", "")).lower() not in _FINISHED:
            continue
        # A multi-node job's rank k (j2c-<hash>-r<k>) is kept in its rank 0's folder.
        if (runs_root / _JOB_CONTAINER.match(name)[1] / FINAL).is_file():  # type: ignore[index]
            await remove(api, name)
            removed.append(name)
    networks = await api.request(
        "GET", "/networks", params={"filters": json.dumps(filters)}, allow=(404,)
    )
    for entry in networks.json() if networks.status_code == 200 else []:
        name = str(entry.get("Name") or entry.get("name") or "")
        job = name.removesuffix("-net")
        if (
            name.endswith("-net")
            and _JOB_CONTAINER.match(job)
            and (runs_root / job / FINAL).is_file()
        ):
            await api.request("DELETE", f"/networks/{name}", allow=(404, 409))
            removed.append(name)
    return removed


def _orphaned_probe(entry: dict[str, Any]) -> bool:
    """An image probe past its time: its own server, killed mid-probe, never removed it (a live
    probe is removed by its runner within ``PROBE_ORPHAN_S``)."""
    created = entry.get("Created")
    return isinstance(created, int | float) and time.time() - created > PROBE_ORPHAN_S
