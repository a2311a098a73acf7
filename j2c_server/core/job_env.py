"""Credentials in a request's ``env``: one rule for every backend.

A request is stored in the registry, listed by ``GET /jobs`` and shown in events, so it must not
carry a credential. An ``env`` entry whose name looks like one (:func:`is_credential_name`:
``*SECRET*``, ``*PASSWORD*``, ``*CREDENTIAL*``, ``*_TOKEN*``, ``*_KEY``, ``*_KEY_ID``, ...) is
refused (400 naming ``env.<NAME>``) unless the operator lists the name in ``scheduler.pass_env``.
A listed name is sent empty; the job gets the value of the submitting server's own environment,
put into the job spec when it is built (:func:`job_env`) and masked wherever a spec is shown or
recorded (:func:`mask_env`). The registry never sees it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping

from j2c_server.core.errors import InvalidInput

# Anywhere in the name: rarely part of an innocent word.
_CREDENTIAL_WORDS = ("SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "PRIVATE_KEY", "APIKEY")
# Whole ``_``-separated parts only: TOKEN in HF_TOKEN, not in TOKENIZERS_PARALLELISM.
_CREDENTIAL_PARTS = frozenset({"TOKEN", "TOKENS", "KEY", "KEYS", "PASS", "JWT", "PAT"})
_SPLIT = re.compile(r"[^A-Z0-9]+")
MASK = "<from the server's environment>"
HINT = (
    "give a job a credential through the operator's mechanism: a Kubernetes Secret "
    "(scheduler.kubernetes.env_from_secret), the Slurm nodes' environment, or a name the "
    "operator lists in scheduler.pass_env"
)


def is_credential_name(name: str) -> bool:
    """Whether an environment variable's name says it holds a credential."""
    upper = name.upper()
    if any(word in upper for word in _CREDENTIAL_WORDS):
        return True
    return not _CREDENTIAL_PARTS.isdisjoint(_SPLIT.split(upper))


def check_request_env(
    env: Mapping[str, str], pass_env: Collection[str], environ: Mapping[str, str] | None = None
) -> None:
    """Refuse credentials in a request's env (InvalidInput naming ``env.<NAME>``)."""
    environ = os.environ if environ is None else environ
    for name in sorted(env):
        field = f"env.{name}"
        if name in pass_env:
            if env[name]:
                raise InvalidInput(
                    f"{field}: its value comes from the server's environment "
                    "(scheduler.pass_env lists it); send it empty",
                    field=field,
                )
            if name not in environ:
                raise InvalidInput(
                    f"{field}: scheduler.pass_env lists it, but the server's environment does "
                    "not set it",
                    field=field,
                    hint="ask the operator to set it where the Jupyter server starts",
                )
        elif is_credential_name(name):
            raise InvalidInput(
                f"{field}: looks like a credential, and a request's env is stored with the job "
                "and shown to whoever lists jobs",
                field=field,
                hint=HINT,
            )


def job_env(
    env: Mapping[str, str], pass_env: Collection[str], environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The request's env as the job gets it: listed names take the server's value."""
    environ = os.environ if environ is None else environ
    out = dict(env)
    for name in env:
        if name in pass_env:
            if name not in environ:
                raise InvalidInput(
                    f"env.{name}: scheduler.pass_env lists it, but the environment of the "
                    "process submitting the job does not set it",
                    field=f"env.{name}",
                )
            out[name] = environ[name]
    return out


def is_secret(name: str, pass_env: Collection[str]) -> bool:
    """A job env entry that must not be shown, recorded or written to disk."""
    return name in pass_env or is_credential_name(name)


def mask_env(env: Mapping[str, str], pass_env: Collection[str]) -> dict[str, str]:
    """``env`` with the values of secret entries replaced by :data:`MASK`."""
    return {name: MASK if is_secret(name, pass_env) else value for name, value in env.items()}
