"""What j2c sends to slurmrestd for one job: the batch script and the job description.

The script only ``exec``s the spec's argv, quoted with :func:`shlex.join` (under pyxis through
``srun --container-image``, since slurmrestd does not read ``#SBATCH`` lines). Resources map to
Slurm's own fields: GPUs to ``gres`` (``gpu:N`` or ``gpu:TYPE:N``), CPUs to ``cpus_per_task``,
memory to ``memory_per_node`` in MiB (``8G`` is 8·10⁹ bytes, ``8Gi`` is 8 GiB: Slurm's ``8G``),
the time limit in minutes. Output goes to ``<job_dir>/<job id>/output.log`` (stderr included),
an absolute path without ``%j`` patterns. The comment carries the j2c job id and key, so a
retried submit finds the job it already created.
"""

from __future__ import annotations

import math
import re
import shlex
from pathlib import Path
from typing import Any

from ..errors import InvalidInput
from .base import JobSpec
from .slurm_settings import SlurmSettings

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
OUTPUT_NAME = "output.log"
COMMENT_PREFIX = "j2c"
CANCEL_MARK = "cancel=requested"
_SAFE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
_GPU_TYPE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_MEMORY_RE = re.compile(r"^(\d+(?:\.\d+)?)([KMGTkmgt]?)(i?)[Bb]?$")
_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4}
_MIB = 1024 * 1024


def memory_mib(value: str) -> int:
    """'16Gi' → 16384, '8G' → 7630 (rounded up): Slurm counts memory in MiB."""
    match = _MEMORY_RE.match(value.strip())
    if match is None:
        raise InvalidInput(
            f"memory {value!r} must look like '16Gi', '8G' or '512Mi'", field="resources.memory"
        )
    number, unit, binary = match.groups()
    base = 1024.0 if binary else 1000.0
    nbytes = float(number) * base ** _POWERS[unit.lower()]
    return max(1, math.ceil(nbytes / _MIB))


def job_comment(spec: JobSpec) -> str:
    return f"{COMMENT_PREFIX} job={spec.job_id} key={spec.key}"


def comment_fields(comment: str | None) -> dict[str, str]:
    """The ``k=v`` words of a j2c comment; {} for a job j2c did not submit."""
    words = (comment or "").split()
    if not words or words[0] != COMMENT_PREFIX:
        return {}
    return dict(word.split("=", 1) for word in words[1:] if "=" in word)


def pyxis_image(image: str) -> str:
    """A docker-style reference as enroot spells it: the registry is followed by '#'
    ('nvcr.io/nvidia/pytorch:24.01-py3' → 'nvcr.io#nvidia/pytorch:24.01-py3'). Local paths
    (squashfs files) and references already in enroot's form pass unchanged."""
    if "#" in image or image.startswith(("/", "./", "docker://", "dockerd://", "podman://")):
        return image
    first, sep, rest = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return f"{first}#{rest}"
    return image


def batch_script(spec: JobSpec, settings: SlurmSettings, run_dir: Path) -> str:
    argv = list(spec.command)
    if settings.container_runtime == "pyxis":
        if not spec.image:
            raise InvalidInput(
                "scheduler.slurm.container_runtime is 'pyxis' but the job names no image",
                field="image",
                hint="choose an image, or set default_image in the j2c configuration",
            )
        argv = [
            "srun",
            "--ntasks=1",
            f"--container-image={pyxis_image(spec.image)}",
            f"--container-mounts={run_dir}:{run_dir}",
            f"--container-workdir={run_dir}",
            *argv,
        ]
    return "\n".join(
        [
            "#!/bin/bash",
            f"# j2c job {spec.job_id}: written by j2c's Slurm backend",
            f"exec {shlex.join(argv)}",
            "",
        ]
    )


def job_environment(spec: JobSpec, settings: SlurmSettings) -> dict[str, str]:
    """Jobs submitted through slurmrestd inherit nothing: this is their whole environment. In a
    pyxis container the image's own PATH applies (bash finds ``srun`` without one)."""
    base = {"PATH": DEFAULT_PATH} if settings.container_runtime == "none" else {}
    return {
        **base,
        **settings.env,
        **spec.env,
        "J2C_JOB_ID": spec.job_id,
        # Python buffers stdout in a file: without this no line shows until the job ends.
        "PYTHONUNBUFFERED": "1",
    }


def _slurm_name(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")
    return f"j2c-{cleaned[:60]}" if cleaned else "j2c"


def check_spec(spec: JobSpec) -> None:
    if not spec.command:
        raise InvalidInput("the job has no command to run", field="command")
    if not _SAFE_RE.match(spec.job_id) or ".." in spec.job_id:
        raise InvalidInput(
            f"job id {spec.job_id!r} must be 1-128 letters, digits, '.', '_', ':' or '-'",
            field="job_id",
        )
    if not _SAFE_RE.match(spec.key):
        raise InvalidInput(
            f"job key {spec.key!r} must be 1-128 letters, digits, '.', '_', ':' or '-'",
            field="key",
        )


def job_description(spec: JobSpec, settings: SlurmSettings, output: Path) -> dict[str, Any]:
    """The ``job`` object of ``POST /job/submit``."""
    resources = spec.resources
    job: dict[str, Any] = {
        "name": _slurm_name(spec.name),
        "comment": job_comment(spec),
        "environment": job_environment(spec, settings),
        "current_working_directory": str(output.parent),
        "standard_output": str(output),
        # A requeued job would run again from scratch behind the user's back.
        "requeue": False,
        "nodes": 1,
        "tasks": 1,
    }
    if resources.gpus:
        if resources.gpu_type is not None and not _GPU_TYPE_RE.match(resources.gpu_type):
            raise InvalidInput(
                f"GPU type {resources.gpu_type!r} must be letters, digits, '.', '_' or '-'",
                field="resources.gpu_type",
            )
        kind = f"gpu:{resources.gpu_type}" if resources.gpu_type else "gpu"
        job["gres"] = f"{kind}:{resources.gpus}"
    if resources.cpus is not None:
        job["cpus_per_task"] = math.ceil(resources.cpus)
    if resources.memory is not None:
        job["memory_per_node"] = memory_mib(resources.memory)
    if resources.time_limit_minutes is not None:
        job["time_limit"] = resources.time_limit_minutes
    for field in ("partition", "account", "qos"):
        value = getattr(settings, field)
        if value:
            job[field] = value
    return job
