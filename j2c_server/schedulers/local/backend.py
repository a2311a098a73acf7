"""The embedded default scheduler: jobs run as detached processes on this machine.

Each job gets a run directory under ``<data>/runs/<job id>/`` (layout in ``files``) and a
supervisor process (``runner.py``) that is nobody's child: it waits for GPUs, runs the job,
forwards a cancel and records the exit code, whether or not a server is alive. This class only
writes the request, starts the supervisor and reads what it records, so a fresh instance (a
restarted server, the CLI, another kernel) sees every job that any instance started.

Blocking work (spawning, file reads, ``nvidia-smi``) runs in worker threads.

**Interrupted** (a new attempt may resume the job, docs/pipeline.md): the job's runner was
killed, not ended by its job. Either its supervisor is gone without an exit record (``lost``:
killed, or the machine restarted), or ``j2c-unpack`` itself died of a signal: it handles SIGTERM
and SIGINT by passing them to the job and exits with the job's code, so only a kill (or a
crash) ends it by a signal. Not when j2c cancelled it or its time limit stopped it. Each
attempt runs in a folder of its own (``<job id>.a<n>`` from the second).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from j2c_server.config import J2CSettings
from j2c_server.core.coalesce import Answers, Coalesced
from j2c_server.core.errors import ConfigError, Conflict, InvalidInput, SchedulerError
from j2c_server.core.file_modes import private_dir, private_file, private_opener, write_private_text
from j2c_server.schedulers.base import JobSpec, LogLine, SchedulerBase, SchedulerState
from j2c_server.schedulers.gpu_ledger import LedgerError, check_ledger_dir, detect_gpu_ids
from j2c_server.schedulers.job_secrets import job_secrets
from j2c_server.schedulers.local.files import RUNS_DIR, RunDir
from j2c_server.schedulers.local.prune import key_index, mark_collected, prune_collected
from j2c_server.schedulers.local.settings import LocalSchedulerSettings
from j2c_server.schedulers.logfile import follow_log_file, parse_cursor
from j2c_server.schedulers.multinode import follow_ranks, parse_rank_cursor
from j2c_server.schedulers.state_files import (
    exclusive_lock,
    is_held,
    read_json,
    same_process,
    write_json_atomic,
)
from j2c_server.schedulers.unpack_cache import CACHE_ENV, CACHE_MAX_ENV, tenant_name
from j2c_server.wire.api import Artifact, Capabilities, JobHandle, JobResults, JobStatus

_JOB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# The job's base environment: what a login shell on this machine would have, plus the standard
# AWS chain and the CUDA/NCCL set-up of this machine. Never the server's own tokens.
_BASE_ENV_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "TZ",
        "TMPDIR",
        "LD_LIBRARY_PATH",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
    }
)
_BASE_ENV_PREFIXES = ("LC_", "AWS_", "CUDA_", "NVIDIA_", "NCCL_")
_MAX_ARTIFACTS = 1000
_RUNNER = f"{__package__}.runner"


class LocalScheduler(SchedulerBase):
    """Runs ``JobSpec.command`` on this machine; see the module docstring."""

    name = "local"
    settings_model = LocalSchedulerSettings
    # No CPU or memory limits: a local job shares this machine as any process of the user does
    # (requests naming them are refused, not run without them).
    capabilities = Capabilities(gpus=True, time_limit=True, multi_node=True)

    @classmethod
    def inventory_target(cls, settings: J2CSettings, image: str | None) -> None:
        """None: the job runs on the lab's own machine and Python, which the packer's own checks
        already compare with."""
        return None

    @classmethod
    def unpack_command(cls, settings: J2CSettings) -> list[str]:
        # Same machine, same install: this interpreter runs j2c-unpack.
        return [sys.executable, "-m", "j2c_server.unpack"]

    def __init__(self, settings: J2CSettings) -> None:
        self._settings = settings.scheduler.section("local", LocalSchedulerSettings)
        self._ledger = Path(settings.scheduler.gpu_ledger).expanduser()
        self._status_reads: Coalesced[RunDir, SchedulerState] = Coalesced(
            lambda runs: asyncio.to_thread(_read_states, runs)
        )
        self._runs = (settings.data_path() / RUNS_DIR).absolute()
        cache_root = self._settings.cache_dir or settings.data_path() / "unpack-cache"
        self._cache = (
            Path(cache_root).expanduser().absolute() / str(os.geteuid()) / tenant_name()
            if self._settings.cache
            else None
        )
        self._gpu_devices: list[str] | None = None
        self._detect_lock = threading.Lock()

    # ------------------------------------------------------------------ protocol

    async def submit(self, spec: JobSpec) -> JobHandle:
        return await asyncio.to_thread(self._submit, spec)

    async def status(self, handle: JobHandle) -> SchedulerState:
        # The watchers' once-a-second reads of one loop step share one thread hop.
        return await self._status_reads(self._run(handle))

    def follow_logs(self, handle: JobHandle, cursor: str | None = None) -> AsyncIterator[LogLine]:
        run = self._run(handle)
        nodes = int(handle.data.get("nodes", 1))
        if nodes > 1:
            parse_rank_cursor(cursor, nodes)  # a bad cursor fails here, not at the first line
            return follow_ranks(
                lambda rank, at: follow_log_file(run.rank_log(rank), at, lambda: _has_ended(run)),
                nodes,
                cursor,
            )
        parse_cursor(cursor)  # a bad cursor fails here, not at the first line
        return follow_log_file(run.log, cursor, lambda: _has_ended(run))

    async def cancel(self, handle: JobHandle) -> None:
        await asyncio.to_thread(_cancel, self._run(handle))

    async def results(self, handle: JobHandle) -> JobResults:
        return await asyncio.to_thread(self._collect, self._run(handle))

    def _collect(self, run: RunDir) -> JobResults:
        """The run's results, then the runs folder bounded (:mod:`.prune`)."""
        results = _collect_results(run)
        if _has_ended(run):
            mark_collected(run)
            with exclusive_lock(self._runs / "submit.lock"):  # never beside a submit's index
                prune_collected(self._runs, self._settings.keep_runs)
        return results

    async def close(self) -> None:
        """Nothing to release: every job belongs to its supervisor, not to this object."""

    # ------------------------------------------------------------------ submit

    def gpu_devices(self) -> list[str]:
        """The GPUs jobs may be given (configured, or detected once)."""
        with self._detect_lock:
            if self._gpu_devices is None:
                self._gpu_devices = detect_gpu_ids(self._settings.gpus, os.environ)
            return self._gpu_devices

    def _submit(self, spec: JobSpec) -> JobHandle:
        if not spec.command:
            raise InvalidInput("the job has no command to run", field="command")
        if not _JOB_ID_RE.match(spec.job_id):
            raise InvalidInput(
                f"job id {spec.job_id!r} must be 1-128 letters, digits, '.', '_' or '-'",
                field="job_id",
            )
        # A multi-node job's ranks all run here: GPUs per node times nodes.
        wanted = spec.resources.gpus * spec.resources.nodes
        devices = self.gpu_devices() if wanted else []
        if wanted > len(devices):
            raise InvalidInput(
                f"the job asks for {wanted} GPU(s) but this machine has {len(devices)}",
                field="resources.gpus",
                hint="ask for fewer, or set scheduler.local.gpus if detection missed some",
            )
        if wanted:
            try:
                check_ledger_dir(self._ledger)
            except LedgerError as exc:
                raise ConfigError(str(exc), field="scheduler.gpu_ledger") from None
        private_dir(self._runs)
        # One submit at a time on this machine, so two retries of one key never both start.
        with exclusive_lock(self._runs / "submit.lock"):
            run = self._existing_run(spec) or self._start(spec, devices)
            index = self._key_index(spec.key)
            private_dir(index.parent)
            write_private_text(index, run.path.name)
        data: dict[str, Any] = {"run_dir": str(run.path)}
        if spec.resources.nodes > 1:
            data["nodes"] = spec.resources.nodes
        return JobHandle(scheduler=self.name, id=run.path.name, data=data)

    def _key_index(self, key: str) -> Path:
        return key_index(self._runs, key)

    def _existing_run(self, spec: JobSpec) -> RunDir | None:
        """The run a previous submit of this key started, if any."""
        try:
            indexed = RunDir(self._runs / self._key_index(spec.key).read_text().strip())
            if indexed.spec.exists():
                return indexed
        except FileNotFoundError:
            pass
        run = RunDir(self._runs / _run_name(spec))
        if not run.path.exists():
            return None
        recorded = read_json(run.spec) or {}
        if recorded.get("key") != spec.key:
            raise Conflict(
                f"job id {spec.job_id!r} already names a local run of another request",
                field="job_id",
            )
        return run

    def _start(self, spec: JobSpec, devices: list[str]) -> RunDir:
        # Prepared under a temporary name and renamed, so a run dir always has its spec.
        staging = RunDir(Path(tempfile.mkdtemp(dir=self._runs, prefix=f".{spec.job_id}.")))
        private_dir(staging.outputs)
        private_dir(staging.work)
        private_file(staging.log)
        limit = spec.resources.time_limit_minutes
        # Credentials (scheduler.pass_env, a presigned manifest...) reach the job through the
        # supervisor's environment, never through a file.
        plain, hidden = job_secrets(spec)
        write_json_atomic(
            staging.spec,
            {
                "key": spec.key,
                "job_id": spec.job_id,
                "name": spec.name,
                "command": spec.command,
                "env": plain,
                "gpus": spec.resources.gpus,
                "nodes": spec.resources.nodes,
                "master_port": _free_port() if spec.resources.nodes > 1 else None,
                "gpu_devices": devices,
                "gpu_ledger": str(self._ledger),
                "cancel_grace_s": self._settings.cancel_grace_s,
                "time_limit_s": limit * 60 if limit else None,
                "submitted_at": time.time(),
            },
        )
        run = RunDir(self._runs / _run_name(spec))
        os.rename(staging.path, run.path)
        try:
            self._spawn_supervisor(run, hidden)
        except BaseException:
            shutil.rmtree(run.path, ignore_errors=True)
            raise
        return run

    def _spawn_supervisor(self, run: RunDir, hidden: dict[str, str]) -> None:
        # Take the run's lock before the supervisor exists and hand it over, so the run never
        # looks dead (lost) while the supervisor starts up.
        lock_fd = os.open(run.lock, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
            with open(run.supervisor_log, "ab", opener=private_opener) as diagnostics:
                launcher = subprocess.Popen(
                    [sys.executable, "-m", _RUNNER, str(run.path), str(lock_fd)],
                    cwd=run.path,
                    env={**self._job_base_env(), **hidden},
                    stdin=subprocess.DEVNULL,
                    stdout=diagnostics,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    pass_fds=(lock_fd,),
                )
            # It forks the real supervisor and exits at once; reaping it leaves no zombie.
            code = launcher.wait()
        except OSError as exc:
            raise SchedulerError(f"cannot start the local job supervisor: {exc}") from None
        finally:
            os.close(lock_fd)
        if code != 0:
            detail = run.supervisor_log.read_text(errors="replace")[-2000:]
            raise SchedulerError(f"the local job supervisor failed to start: {detail}")

    def _job_base_env(self) -> dict[str, str]:
        extra = self._settings.pass_env
        names = _BASE_ENV_NAMES | {name for name in extra if not name.endswith("*")}
        prefixes = _BASE_ENV_PREFIXES + tuple(name[:-1] for name in extra if name.endswith("*"))
        env = {k: v for k, v in os.environ.items() if k in names or k.startswith(prefixes)}
        env.pop("CUDA_VISIBLE_DEVICES", None)  # the supervisor assigns the GPUs
        env.setdefault("PATH", os.defpath)
        env["PYTHONUNBUFFERED"] = "1"
        if self._cache is not None:
            # Made here, with its missing parents, 0700: the data dir's folders are private
            # (j2c-unpack would make the leaf private but its parents with the umask).
            private_dir(self._cache)
            env[CACHE_ENV] = str(self._cache)
            if self._settings.cache_max:
                env[CACHE_MAX_ENV] = self._settings.cache_max
        return env

    # ------------------------------------------------------------------ reading a run

    def _run(self, handle: JobHandle) -> RunDir:
        if handle.scheduler != self.name:
            raise InvalidInput(f"not a local job: {handle.scheduler!r}", field="handle")
        if "run_dir" in handle.data:
            return RunDir(Path(handle.data["run_dir"]))
        if not _JOB_ID_RE.match(handle.id):
            raise InvalidInput(f"not a local job id: {handle.id!r}", field="handle")
        return RunDir(self._runs / handle.id)


def _run_name(spec: JobSpec) -> str:
    """The run folder's name: the job id, and for a resumed job's later attempt its number."""
    return spec.job_id if spec.attempt == 1 else f"{spec.job_id}.a{spec.attempt}"


def _free_port() -> int:
    """A port free on this machine now, for rank 0 to listen on (MASTER_PORT)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _has_ended(run: RunDir) -> bool:
    return run.exit.exists() or not is_held(run.lock)


def _read_states(runs: list[RunDir]) -> Answers[RunDir, SchedulerState]:
    states: Answers[RunDir, SchedulerState] = {}
    for run in runs:
        try:
            states[run] = _read_state(run)
        except Exception as exc:  # that job's caller raises it
            states[run] = exc
    return states


def _read_state(run: RunDir) -> SchedulerState:
    ended = read_json(run.exit)
    if ended is None:
        if is_held(run.lock):
            return _live_state(run)
        # It may have finished between the two looks.
        ended = read_json(run.exit)
        if ended is None:
            return SchedulerState(
                status=JobStatus.lost,
                message="the job's supervisor is gone and left no exit record "
                "(killed, or the machine restarted)",
                interrupted="its local supervisor was killed",
            )
    return _final_state(ended)


def _live_state(run: RunDir) -> SchedulerState:
    if run.cancel.exists():
        return SchedulerState(status=JobStatus.cancelling, message="stopping the job")
    job = read_json(run.job) or {}
    if job.get("state") == "running":
        return SchedulerState(status=JobStatus.running)
    if job.get("state") == "queued":
        return SchedulerState(status=JobStatus.queued, message=job.get("message"))
    return SchedulerState(status=JobStatus.submitted, message="starting")


def _final_state(ended: dict[str, Any]) -> SchedulerState:
    code: int | None = ended.get("exit_code")
    if ended.get("cancelled"):
        return SchedulerState(status=JobStatus.cancelled, message="cancelled", exit_code=code)
    if code == 0:
        return SchedulerState(status=JobStatus.succeeded, exit_code=0)
    message = f"exit code {code}"
    if ended.get("failed_rank") is not None:
        message += f" on rank {ended['failed_rank']}"
    if ended.get("signal"):
        message += f" (killed by {ended['signal']})"
    if ended.get("error"):
        message = f"{ended['error']}: {message}"
    interrupted = None
    if ended.get("signal") and not ended.get("timed_out"):
        # j2c-unpack passes SIGTERM/SIGINT on and exits with the job's code: a signal that
        # ended it was a kill from outside (a cancel and the time limit are said above).
        interrupted = f"its runner j2c-unpack was killed ({ended['signal']})"
    return SchedulerState(
        status=JobStatus.failed, message=message, exit_code=code, interrupted=interrupted
    )


def _cancel(run: RunDir) -> None:
    if run.exit.exists() or not run.path.exists():
        return
    private_file(run.cancel)
    job = read_json(run.job) or {}
    if is_held(run.lock):
        # The supervisor forwards SIGTERM to the job's group and escalates after the grace.
        # Before it has written job.json it has not started the job, and it reads the marker.
        supervisor = job.get("supervisor")
        if supervisor and same_process(supervisor["pid"], supervisor["start_time"]):
            os.kill(supervisor["pid"], signal.SIGTERM)
        return
    # Lost: no supervisor is left to escalate, so end an orphaned job (every rank) at once.
    for child in job.get("ranks") or [job.get("child")]:
        if child and same_process(child["pid"], child["start_time"]):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child["pid"], signal.SIGKILL)


def _collect_results(run: RunDir) -> JobResults:
    ended = read_json(run.exit) or {}
    files = sorted(path for path in run.outputs.rglob("*") if path.is_file())
    artifacts = [
        Artifact(
            name=path.relative_to(run.outputs).as_posix(),
            size=path.stat().st_size,
            url=path.as_uri(),
        )
        for path in files[:_MAX_ARTIFACTS]
    ]
    notebooks = [path for path in files if path.parent == run.outputs and path.suffix == ".ipynb"]
    notebook = max(notebooks, key=lambda path: path.stat().st_mtime, default=None)
    return JobResults(
        exit_code=ended.get("exit_code"),
        artifacts=artifacts,
        executed_notebook=notebook.as_uri() if notebook else None,
        output_uri=run.outputs.as_uri(),
    )
