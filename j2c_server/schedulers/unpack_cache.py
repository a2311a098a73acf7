"""Where each backend keeps ``j2c-unpack``'s node layer cache for a job: one folder per user.

Tenants that share a uid (every hub user is ``jovyan`` under the common spawners) must not share
cache entries or validated plans, so every backend's cache folder ends in the user's name:
``$JUPYTERHUB_USER`` when the server runs under a hub, else the account name of the server's real
uid (never ``$USER``, which anyone sets). It keeps tenants apart by accident, not by force: a
process of the same uid can write any folder of that uid, so isolation between users who share
a uid needs the scheduler (one uid per user) — docs/operators.md, "Security model".
"""

from __future__ import annotations

import os
import pwd
import re
from collections.abc import Mapping

CACHE_ENV = "J2C_UNPACK_CACHE"  # as j2c_server.unpack.cache.node reads it (no import of unpack/)
CACHE_MAX_ENV = "J2C_UNPACK_CACHE_MAX"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def tenant_name(environ: Mapping[str, str] | None = None) -> str:
    """This server's user, as one safe path component."""
    env = os.environ if environ is None else environ
    name = env.get("JUPYTERHUB_USER", "").strip()
    if not name:
        try:
            name = pwd.getpwuid(os.getuid()).pw_name
        except KeyError:
            name = f"uid-{os.getuid()}"
    cleaned = _UNSAFE.sub("_", name)[:64]
    return cleaned if cleaned.strip(".") else f"user-{cleaned}"
