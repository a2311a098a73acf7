"""How a job's credentials reach it: by reference, never by value in a spec a scheduler keeps.

A scheduler stores the spec it was given and shows it to whoever may read jobs there: a
Kubernetes Job (every reader of Jobs in the namespace), a Ray job (every client of the
dashboard, ``GET /api/jobs/``), a container's create request (``podman inspect``, and
``gpu-request.json`` of a job waiting for GPUs), a Slurm job's environment. So a job's
environment is split (:func:`job_secrets`): what may be written there, and what is secret by its
name or its value (``core/job_env.py``) or was handed over as secret (``JobSpec.secret_env``: a
``pass_env`` value, the outputs upload policy, a presigned manifest URL). Each backend hands the
secret part over its own way: a Kubernetes Secret of the job's own, or a file written ``0600``
on the job's own mount (:func:`write_secrets_file`: the container's job folder, the Slurm run
folder, a per-user folder the Ray nodes read, ``scheduler.ray.secrets_dir``), named to the job
by ``$J2C_SECRETS_FILE`` and read by ``j2c-unpack`` before anything else
(``unpack/job_secrets.py``). The local scheduler, whose job is the server user's own process,
hands them to the job's supervisor as its environment.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from collections.abc import Mapping
from pathlib import Path

from j2c_server.core.errors import SchedulerError
from j2c_server.core.job_env import split_env
from j2c_server.schedulers.base import JobSpec

SECRETS_FILE_ENV = "J2C_SECRETS_FILE"  # as unpack/job_secrets.py reads it (no import of unpack/)
_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def job_secrets(
    spec: JobSpec, operator_env: Mapping[str, str] | None = None
) -> tuple[dict[str, str], dict[str, str]]:
    """The job's environment (the operator's ``operator_env`` of the backend, then the spec's)
    as (what its spec may hold, what reaches it by reference only)."""
    plain, secret = split_env({**(operator_env or {}), **spec.env})
    for name in spec.secret_env:
        plain.pop(name, None)
    return plain, {**secret, **spec.secret_env}


def write_secrets_file(path: Path, values: Mapping[str, str]) -> None:
    """``values`` as ``{"env": {...}}`` in ``path``, mode 0600 (the caller gives it to the job's
    uid where that is another), written under a new name and renamed: never through a link,
    never half there."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    try:
        fd = os.open(temporary, _FLAGS, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump({"env": dict(values)}, handle)
        os.replace(temporary, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise SchedulerError(
            f"cannot write the job's credentials file {path}: {exc.strerror or exc}"
        ) from None


def remove_secrets_file(path: Path) -> None:
    """The job's credentials file gone (the job has ended; a missing one is fine)."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
