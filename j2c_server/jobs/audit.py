"""The audit trail: one structured line per mutating action, through the server's logger.

Submit, cancel, remove and copy-artifact each log ``j2c audit {json}`` once, naming who (the
Jupyter user — the hub user behind JupyterHub — or the OS user for the CLI and magic), what,
the job and the front end, so a hub's log collection keeps the trail. The JSON holds names and
ids only: no paths, env values or arguments.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pwd
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

AUDIT_PREFIX = "j2c audit "
Log = logging.Logger | logging.LoggerAdapter[logging.Logger]
Action = Literal["submit", "cancel", "remove", "copy_artifact"]


@dataclass(frozen=True)
class Actor:
    """Who asks, and through which front end (``rest``, ``cli``, ``magic``)."""

    user: str
    frontend: str


def local_user(environ: Mapping[str, str] | None = None) -> str:
    """Who the CLI, the magic and a detached watcher act as: the hub user whose server this is
    (``$JUPYTERHUB_USER``, set by the spawner for the server and everything it starts), else
    the account of the process's real uid. Never ``$USER``/``$LOGNAME``: anyone sets those
    (``USER=alice j2c submit``)."""
    env = os.environ if environ is None else environ
    hub_user = env.get("JUPYTERHUB_USER", "").strip()
    if hub_user:
        return hub_user
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:  # a container uid without a passwd entry
        return f"uid-{os.getuid()}"


def local_actor(frontend: str) -> Actor:
    return Actor(user=local_user(), frontend=frontend)


def audit(log: Log, action: Action, actor: Actor, job_id: str, **details: Any) -> None:
    """Log the action once; never raises (an audit line must not fail the action)."""
    entry = {
        "time": round(time.time(), 3),
        "action": action,
        "user": actor.user,
        "frontend": actor.frontend,
        "job_id": job_id,
        **details,
    }
    # A broken log handler must not fail the user's action.
    with contextlib.suppress(Exception):
        log.info("%s%s", AUDIT_PREFIX, json.dumps(entry, sort_keys=True, default=str))
