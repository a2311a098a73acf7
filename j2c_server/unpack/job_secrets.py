"""The job's credentials, read before anything else from the file the scheduler named.

A scheduler keeps and shows the spec it was given, so the server never writes a credential into
one (``schedulers/job_secrets.py``): a ``pass_env`` value, the outputs upload policy or a
presigned manifest URL reaches the job in a file ``0600`` on its own mount (or through a
Kubernetes Secret, as plain environment), named by ``$J2C_SECRETS_FILE``: ``{"env": {NAME:
value}}``. Its entries join this process's environment, so the entry point and the outputs
upload see them as if the scheduler had set them; the variable naming the file does not reach
the entry point.

A manifest given as ``env:NAME`` (a presigned URL, whose signature is a credential) is the value
of ``$NAME``, taken out of the environment once read: the entry point has no use for it.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import MutableMapping

from j2c_server.unpack.errors import LocalIOError, ManifestInvalid

SECRETS_FILE_ENV = "J2C_SECRETS_FILE"
ENV_REFERENCE = "env:"
_LIMIT = 1024 * 1024


def load_secrets(environ: MutableMapping[str, str] | None = None) -> int:
    """The entries of ``$J2C_SECRETS_FILE`` put into ``environ`` (this process's by default);
    how many. LocalIOError (74) when the file is named but cannot be read as one."""
    environ = os.environ if environ is None else environ
    path = environ.pop(SECRETS_FILE_ENV, "")
    if not path:
        return 0
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise LocalIOError(
            f"cannot read the job's credentials file {path} ({SECRETS_FILE_ENV}): "
            f"{exc.strerror or exc}",
            field=SECRETS_FILE_ENV,
        ) from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise LocalIOError(f"{path} ({SECRETS_FILE_ENV}) is not a file", field=SECRETS_FILE_ENV)
        raw = handle.read(_LIMIT + 1)
    try:
        values = json.loads(raw)["env"] if len(raw) <= _LIMIT else None
    except (ValueError, KeyError, TypeError):
        values = None
    if not isinstance(values, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in values.items()
    ):
        raise LocalIOError(
            f"the job's credentials file {path} ({SECRETS_FILE_ENV}) is not "
            '{"env": {NAME: value}}',
            field=SECRETS_FILE_ENV,
        )
    environ.update(values)
    return len(values)


def resolve_manifest(uri: str, environ: MutableMapping[str, str] | None = None) -> str:
    """``uri``, or for ``env:NAME`` the value of ``$NAME`` (removed from ``environ``)."""
    if not uri.startswith(ENV_REFERENCE):
        return uri
    environ = os.environ if environ is None else environ
    name = uri.removeprefix(ENV_REFERENCE)
    value = environ.pop(name, "")
    if not value:
        raise ManifestInvalid(
            f"the manifest is given as {uri}, but ${name} is not set (the scheduler hands it "
            f"over in {SECRETS_FILE_ENV}'s file or a Secret)",
            field="manifest",
        )
    return value
