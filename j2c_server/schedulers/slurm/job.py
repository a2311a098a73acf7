"""What j2c sends to slurmrestd for one job: the batch script and the job description.

The script only ``exec``s the spec's argv, quoted with :func:`shlex.join` (under pyxis through
``srun --container-image``, since slurmrestd does not read ``#SBATCH`` lines). Resources map to
Slurm's own fields: GPUs to ``gres`` (``gpu:N`` or ``gpu:TYPE:N``), CPUs to ``cpus_per_task``,
memory to ``memory_per_node`` in MiB (``8G`` is 8·10⁹ bytes, ``8Gi`` is 8 GiB: Slurm's ``8G``),
the time limit in minutes. Output goes to ``<job_dir>/<job id>/output.log`` (stderr included),
an absolute path without ``%j`` patterns. The comment carries the j2c job id and key, so a
retried submit finds the job it already created.

A job on N nodes (``resources.nodes``) asks for N nodes with one task each; the script exports
``MASTER_ADDR`` (the address of the allocation's first node, from ``scontrol``) and
``MASTER_PORT`` (the request's, else 20000 + the Slurm job id mod 20000), then runs the argv once
per node with ``srun --label`` (every line starts with its task, which is the node rank) and
``--kill-on-bad-exit`` (one failed rank ends the others). srun's own exit code is the highest
of the ranks', so each rank records its code with the time it ended in ``<run dir>/ranks/``
and the script exits with the first non-zero one.
"""

from __future__ import annotations

import math
import re
import shlex
from pathlib import Path
from typing import Any

from j2c_server.core.errors import InvalidInput
from j2c_server.schedulers.base import JobSpec
from j2c_server.schedulers.job_secrets import SECRETS_FILE_ENV, job_secrets
from j2c_server.schedulers.slurm.settings import SlurmSettings
from j2c_server.schedulers.unpack_cache import CACHE_ENV, CACHE_MAX_ENV, tenant_name

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
OUTPUT_NAME = "output.log"
SECRETS_NAME = "secrets.json"
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


_LABEL_RE = re.compile(r"^\s*(\d+): ")
# Runs on each node: the argv, then its exit code with when it ended, for the batch script.
_RANK_WRAPPER = (
    '"$@"; code=$?; echo "$(date +%s%N) $SLURM_NODEID $code" '
    '>"$J2C_RANKS_DIR/$SLURM_NODEID.exit"; exit $code'
)


def batch_script(spec: JobSpec, settings: SlurmSettings, run_dir: Path) -> str:
    nodes = spec.resources.nodes
    if nodes > 1:
        return _multi_node_script(spec, settings, run_dir, nodes)
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


def _multi_node_script(spec: JobSpec, settings: SlurmSettings, run_dir: Path, nodes: int) -> str:
    ranks = run_dir / "ranks"
    step = [
        "srun",
        f"--nodes={nodes}",
        f"--ntasks={nodes}",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=1",
        "--label",
    ]
    if settings.container_runtime == "pyxis":
        if not spec.image:
            raise InvalidInput(
                "scheduler.slurm.container_runtime is 'pyxis' but the job names no image",
                field="image",
            )
        step += [
            f"--container-image={pyxis_image(spec.image)}",
            f"--container-mounts={run_dir}:{run_dir}",
            f"--container-workdir={run_dir}",
        ]
    wrapped = ["bash", "-c", _RANK_WRAPPER, "j2c-rank", *spec.command]
    return "\n".join(
        [
            "#!/bin/bash",
            f"# j2c job {spec.job_id} on {nodes} nodes: written by j2c's Slurm backend",
            'first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
            "addr=$(scontrol -o show node \"$first\" | sed -n 's/.* NodeAddr=\\([^ ]*\\).*/\\1/p')",
            'export MASTER_ADDR="${addr:-$first}"',
            'export MASTER_PORT="${MASTER_PORT:-$((20000 + SLURM_JOB_ID % 20000))}"',
            f"export J2C_RANKS_DIR={shlex.quote(str(ranks))}",
            'mkdir -p "$J2C_RANKS_DIR"',
            shlex.join(step + wrapped),
            "code=$?",
            "# The job's exit code: the first rank that failed, not srun's highest.",
            'first_failed=$(cat "$J2C_RANKS_DIR"/*.exit 2>/dev/null | sort -n | '
            "awk '$3 != 0 { print $2, $3; exit }')",
            'if [[ -n "$first_failed" ]]; then',
            '    read -r rank rank_code <<<"$first_failed"',
            # j2c's line, tagged as j2c-unpack's are (core/j2c_lines.py).
            '    echo "j2c[$J2C_LINE_TAG] error running: rank $rank failed with exit code"'
            ' "$rank_code" >&2',
            '    exit "$rank_code"',
            "fi",
            'exit "$code"',
            "",
        ]
    )


# srun relays a task's output in pieces of at most this many bytes, each labelled as a line of
# its own (measured: a 4 kB inventory line arrived as 1024-byte labelled pieces).
SRUN_PIECE = 1024


class RankLines:
    """Lines of ``srun --label``'s output, a long line's pieces joined again: a labelled piece
    of exactly :data:`SRUN_PIECE` bytes is continued by that rank's next one. (A line of exactly
    that length is joined with the next: rare, and only its display suffers.)"""

    def __init__(self) -> None:
        self._pending: dict[int | None, str] = {}

    def feed(self, text: str) -> tuple[int | None, str] | None:
        """The whole line this labelled one ends, or None while its pieces keep coming."""
        rank, piece = label_rank(text)
        joined = self._pending.pop(rank, "") + piece
        if rank is not None and len(piece.encode()) == SRUN_PIECE:
            self._pending[rank] = joined
            return None
        return rank, joined

    def rest(self) -> list[tuple[int | None, str]]:
        """Pieces still waiting when the output ends."""
        left = list(self._pending.items())
        self._pending.clear()
        return left


def label_rank(text: str) -> tuple[int | None, str]:
    """A line of ``srun --label``'s output as (task = node rank, the line); (None, line) for a
    line of the batch script's own."""
    match = _LABEL_RE.match(text)
    if match is None:
        return None, text
    return int(match.group(1)), text[match.end() :]


def job_environment(
    spec: JobSpec, settings: SlurmSettings, run_dir: Path | None = None
) -> dict[str, str]:
    """Jobs submitted through slurmrestd inherit nothing: this is their whole environment. In a
    pyxis container the image's own PATH applies (bash finds ``srun`` without one). Credentials
    are not in it (slurmctld keeps a job's environment and shows it): they wait in
    ``<run_dir>/secrets.json`` (0600, :func:`secrets_path`), named by ``$J2C_SECRETS_FILE``."""
    base = {"PATH": DEFAULT_PATH} if settings.container_runtime == "none" else {}
    cache: dict[str, str] = {}
    if settings.cache_dir:
        # One folder per user: users who share a uid do not share entries (unpack_cache.py).
        cache[CACHE_ENV] = f"{settings.cache_dir.rstrip('/')}/{tenant_name()}"
        if settings.cache_max:
            cache[CACHE_MAX_ENV] = settings.cache_max
    plain, secret = job_secrets(spec, settings.env)
    if secret and run_dir is not None:
        cache[SECRETS_FILE_ENV] = str(secrets_path(run_dir))
    return {
        **base,
        **plain,
        **cache,
        # An array's template (``<sweep>-{variant}``, filled in by j2c-unpack) where it has one.
        "J2C_JOB_ID": spec.env.get("J2C_JOB_ID") or spec.job_id,
        # Python buffers stdout in a file: without this no line shows until the job ends.
        "PYTHONUNBUFFERED": "1",
    }


def secrets_path(run_dir: Path) -> Path:
    """The job's credentials file in its own run folder (0700, the user's)."""
    return run_dir / SECRETS_NAME


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
        "environment": job_environment(spec, settings, output.parent),
        "current_working_directory": str(output.parent),
        "standard_output": str(output),
        # A requeued job would run again from scratch behind the user's back. slurmrestd
        # v0.0.38 ignores it, though: a requeue is then caught as an interruption (state.py).
        "requeue": False,
        "nodes": resources.nodes,
        "tasks": resources.nodes,
    }
    if resources.nodes > 1:
        job["tasks_per_node"] = 1
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
