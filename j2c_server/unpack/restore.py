"""A resumed attempt's start: the checkpoint the job's last attempt synced, restored into this
attempt's working copy before the entry point runs (``--restore PLAN --restore-digest ...``).

The server writes the **restore plan** when it starts a new attempt of a job that was preempted
or lost its node (jobs/drive/attempts.py), from the last outputs index whose sha256 the job's
log holds, and pins it by its own sha256 on the command line: a plan changed in the store is
refused (exit 65), as a swapped manifest would be. JSON, format 1::

    {"format": 1, "attempt": 2,
     "entry": "checkpoints/step_12.pt", "saved_at": 1700000000.0,
     "files": [{"name": "checkpoints/step_12.pt", "size": 123, "sha256": "<hex>",
                "url": "https://... (a presigned job's only)"}],
     "carry": {"files": [{"name", "size", "sha256"}...],
               "checkpoints": [{"entry", "folder", "saved_at", "files": [names]}...]}}

- ``files``: the newest checkpoint entry's files, each fetched from where the outputs sync put
  it (``<--output-uri>/<name>``, or its ``url``), verified against its sha256 (exit 67 if it
  differs, 66 if it is gone), written beside its place and renamed into it with the entry's
  save time as its mtime: the job finds its checkpoint as it left it.
- ``carry``: the rest of that index (outputs.py's :meth:`~.outputs.OutputsSync.carry`): what
  this attempt's syncs keep listing without uploading it again.

Then the job's environment says where it resumes from: ``J2C_RESUMED_FROM`` (the entry's path
relative to the working directory) and ``J2C_RESUMED_SAVED_AT`` (its Unix time).
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from j2c_server.core.units import byte_size, count
from j2c_server.storage.base import is_plain_relative_path
from j2c_server.unpack import summary
from j2c_server.unpack.checkpoints import CarriedEntry
from j2c_server.unpack.errors import (
    LayerCorrupt,
    LayerMissing,
    LocalIOError,
    ManifestInvalid,
    StoreUnavailable,
)
from j2c_server.unpack.fetch import download, shown
from j2c_server.unpack.log import Stage

PLAN_LIMIT = 16 * 1024 * 1024
PLAN_FORMAT = 1


@dataclass(frozen=True)
class PlanFile:
    name: str
    size: int
    sha256: str
    url: str | None = None


@dataclass(frozen=True)
class Plan:
    attempt: int
    entry: str | None
    saved_at: float | None
    files: list[PlanFile]
    carried_files: list[PlanFile]
    carried_entries: list[CarriedEntry]


@dataclass(frozen=True)
class Restored:
    """What was restored: (name, local path, size, sha256) of each file, and the plan."""

    plan: Plan
    files: list[tuple[str, Path, int, str]]

    @property
    def bytes(self) -> int:
        return sum(size for _, _, size, _ in self.files)


def read_plan(uri: str, pinned: str) -> Plan:
    """The plan at ``uri``, refused unless its bytes hash to ``pinned``."""
    with tempfile.TemporaryDirectory(prefix="j2c-restore-") as folder:
        local = Path(folder) / "plan.json"
        sha256, size = download(uri, local, threading.Event())
        if size > PLAN_LIMIT:
            raise ManifestInvalid(f"the restore plan {shown(uri)} is too large", field="restore")
        if sha256 != pinned.removeprefix("sha256:"):
            raise ManifestInvalid(
                f"the restore plan at {shown(uri)} is sha256:{sha256}, not the {pinned} this "
                "attempt was given (--restore-digest): it was changed in the store; nothing run",
                field="restore",
                hint="someone else who can write the store may have replaced it",
            )
        try:
            raw = json.loads(local.read_bytes())
            return _plan(raw)
        except (ValueError, KeyError, TypeError) as exc:
            raise ManifestInvalid(
                f"the restore plan at {shown(uri)} is not valid: {exc}", field="restore"
            ) from None


def _plan(raw: dict[str, Any]) -> Plan:
    if raw.get("format") != PLAN_FORMAT:
        raise ValueError(f"format {raw.get('format')!r}; this j2c-unpack reads {PLAN_FORMAT}")
    carry = raw.get("carry") or {}
    entries = []
    sizes = {item.name: item for item in map(_file, carry.get("files") or [])}
    for entry in carry.get("checkpoints") or []:
        names = [str(name) for name in entry["files"]]
        entries.append(
            CarriedEntry(
                name=_name(str(entry["entry"])),
                folder=_name(str(entry["folder"])),
                saved_at=float(entry["saved_at"]),
                files=tuple(
                    (name, sizes[name].size, sizes[name].sha256) for name in names if name in sizes
                ),
            )
        )
    saved_at = raw.get("saved_at")
    return Plan(
        attempt=int(raw["attempt"]),
        entry=_name(str(raw["entry"])) if raw.get("entry") else None,
        saved_at=float(saved_at) if saved_at is not None else None,
        files=[_file(item) for item in raw.get("files") or []],
        carried_files=list(sizes.values()),
        carried_entries=entries,
    )


def _name(name: str) -> str:
    if not is_plain_relative_path(name):
        raise ValueError(f"{name!r} is not a path inside the working copy")
    return name


def _file(item: dict[str, Any]) -> PlanFile:
    sha256 = str(item["sha256"])
    if len(sha256) != 64 or sha256.strip("0123456789abcdef"):
        raise ValueError(f"{sha256!r} is not a sha256")
    url = item.get("url")
    return PlanFile(_name(str(item["name"])), int(item["size"]), sha256, str(url) if url else None)


def restore(plan: Plan, code: Path, output_uri: str | None) -> Restored:
    """Every file of the plan in place under ``code``, verified; said in one line."""
    stage = Stage("restoring")
    done: list[tuple[str, Path, int, str]] = []
    mtime = plan.saved_at or time.time()
    for item in plan.files:
        target = code / item.name
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LocalIOError(f"cannot make {target.parent}: {exc.strerror}") from None
        partial = target.with_name(f".{target.name}.j2c-restore")
        try:
            _fetch(item, output_uri, partial)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        os.utime(partial, (mtime, mtime))
        os.replace(partial, target)
        done.append((item.name, target, item.size, item.sha256))
    restored = Restored(plan, done)
    summary.add_bytes(restored=restored.bytes)
    when = time.strftime("%H:%M:%S", time.localtime(plan.saved_at)) if plan.saved_at else "?"
    stage.done(
        f"attempt {plan.attempt} resumes from {plan.entry} (saved {when}): "
        f"{count(len(done), 'file')}, {byte_size(restored.bytes)}"
        if plan.entry
        else f"attempt {plan.attempt}: no checkpoint to resume from"
    )
    return restored


def _fetch(item: PlanFile, output_uri: str | None, partial: Path) -> None:
    """The file from its ``url`` (a presigned job's), else from the outputs store where the
    last attempt's sync put it; verified either way."""
    if item.url is not None:
        sha256, size = download(item.url, partial, threading.Event())
        if sha256 != item.sha256 or size != item.size:
            raise LayerCorrupt(
                f"the checkpoint file {item.name} at {shown(item.url)} is sha256:{sha256}, not "
                f"the sha256:{item.sha256} its outputs index lists: not restored; nothing run",
                field="restore",
            )
        return
    if not output_uri:
        raise ManifestInvalid(
            f"the restore plan names {item.name} without a url, and the job has no "
            "--output-uri to find it under",
            field="restore",
        )
    asyncio.run(_from_store(output_uri, item, partial))


async def _from_store(output_uri: str, item: PlanFile, partial: Path) -> None:
    from j2c_server.core.errors import IntegrityError, J2CError
    from j2c_server.storage import ObjectNotFound, open_store_from_env

    where = f"{shown(output_uri)}/{item.name}"
    try:
        store = open_store_from_env(output_uri)
    except J2CError as exc:
        raise StoreUnavailable(f"cannot open {shown(output_uri)}: {exc.message}") from None
    try:
        await store.get_file(item.name, partial, sha256=item.sha256)
    except ObjectNotFound:
        raise LayerMissing(
            f"the checkpoint file {where} is not in the store: not restored; nothing run",
            field="restore",
        ) from None
    except IntegrityError:
        raise LayerCorrupt(
            f"the checkpoint file {where} is not the sha256:{item.sha256} its outputs index "
            "lists (changed in the store after the job synced it): not restored; nothing run",
            field="restore",
        ) from None
    except J2CError as exc:
        raise StoreUnavailable(f"downloading {where}: {exc.message}", hint=exc.hint) from None
    finally:
        await store.close()


def resumed_env(restored: Restored, code: Path, cwd: Path) -> dict[str, str]:
    """``J2C_RESUMED_FROM`` (relative to the working directory) and ``J2C_RESUMED_SAVED_AT``."""
    plan = restored.plan
    if not plan.entry or not restored.files:
        return {}
    env = {"J2C_RESUMED_FROM": os.path.relpath(code / plan.entry, cwd)}
    if plan.saved_at is not None:
        env["J2C_RESUMED_SAVED_AT"] = f"{plan.saved_at:.3f}"
    return env
