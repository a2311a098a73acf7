"""The detached supervisor of one local job: ``python -m j2c_server.schedulers.local.runner``.

Started by the local scheduler in a session of its own, it detaches once more (so it is nobody's
child and never a zombie of the server), then, with no server needed:

1. records its PID and start time in ``job.json`` while holding ``job.lock`` for its whole life;
2. waits in line for the GPUs the job asked for (status queued);
3. starts the job in a new session, cwd ``work/``, stdout and stderr into ``output.log``; a job
   on N nodes starts N ranks, each in a session of its own, with ``J2C_NODE_RANK``,
   ``MASTER_ADDR`` (127.0.0.1) and ``MASTER_PORT``, its share of the GPUs and its own log;
4. forwards SIGTERM/SIGINT to the job's process groups and sends SIGKILL after the grace (the
   same when the job reaches its time limit, or when one rank fails: the others are stopped);
5. when the job ends, kills what is left of its process groups, writes ``exit.json`` atomically
   (the exit code: the first non-zero rank's) and frees the GPUs.

Its records (``job.json``, ``exit.json``) wait for space when the data dir's disk is full
(``state_files.write_record``): a supervisor that died of it left its job ``lost`` although the
job ran to its end.

Arguments: the run directory and the number of the inherited file descriptor that holds
``job.lock`` (taken by the scheduler before the start, so the run never looks dead while the
supervisor boots). Its environment is the job's base environment. Standard library only: it
starts fast.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from j2c_server.core.file_modes import private_dir, private_opener
from j2c_server.core.j2c_lines import TAG_ENV, format_line
from j2c_server.core.units import count, timed_out
from j2c_server.schedulers.gpu_ledger import (
    DEFAULT_LEDGER_DIR,
    GpuLedger,
    LedgerError,
    waiting_message,
)
from j2c_server.schedulers.local.files import RunDir
from j2c_server.schedulers.state_files import process_start_time, read_json, write_record

_GPU_POLL_S = 0.2
_RANK_POLL_S = 0.05
# Exit code for a command that could not be started, as a shell reports it.
_CANNOT_START = 127
# Less free than this where the job's folder is, when it failed: the disk was full.
DISK_FULL_BYTES = 1024 * 1024
_DISK_POLL_S = 0.25


class DiskWatch:
    """The least free space seen on the disk of the job's folder while the job ran: a job whose
    writes met a full disk may die saying nothing (its log is on that disk), and the space may
    be back by the time it ends. One ``statvfs`` every 0.25 s, in a thread of its own."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.lowest: int | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="disk-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(_DISK_POLL_S):
            self.sample()

    def sample(self) -> None:
        try:
            stat = os.statvfs(self.folder)
        except OSError:
            return
        free = stat.f_bavail * stat.f_frsize
        self.lowest = free if self.lowest is None else min(self.lowest, free)

    def stop(self) -> int | None:
        """Stop watching; the lowest free bytes seen, now included."""
        self._done.set()
        self.sample()
        return self.lowest


class Supervisor:
    def __init__(self, run: RunDir) -> None:
        self.run = run
        spec = read_json(run.spec)
        if spec is None:
            raise SystemExit(f"{run.spec} is missing")
        self.spec: dict[str, Any] = spec
        self.job_id: str = spec["job_id"]
        # The machine's GPU pool, shared with every user's jobs (see schedulers/gpu_ledger.py).
        self.ledger = GpuLedger(Path(spec.get("gpu_ledger") or DEFAULT_LEDGER_DIR))
        self.nodes = int(spec.get("nodes") or 1)
        self.children: list[subprocess.Popen[bytes]] = []
        self.rank_codes: list[tuple[int, int]] = []  # (rank, raw code) in the order they ended
        self.stop_signal: int | None = None
        self.stop_sent = False
        self.timed_out = False
        self.disk: DiskWatch | None = None
        self.record: dict[str, Any] = {
            "supervisor": {"pid": os.getpid(), "start_time": process_start_time(os.getpid())},
            "child": None,
            "state": "starting",
            "message": None,
            "gpus": [],
            "submitted_at": spec["submitted_at"],
            "started_at": None,
        }

    # ------------------------------------------------------------------ signals

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGALRM, self._on_grace_over)

    def _on_stop(self, signum: int, _frame: FrameType | None) -> None:
        if self.stop_signal is not None:
            return  # the first request already started the grace period
        self.stop_signal = signum
        if self.children:
            self._stop_child(signum)

    def _stop_child(self, signum: int) -> None:
        self.stop_sent = True
        self._signal_group(signum)
        grace = float(self.spec["cancel_grace_s"])
        if grace > 0:
            signal.setitimer(signal.ITIMER_REAL, grace)
        else:
            self._signal_group(signal.SIGKILL)

    def _on_grace_over(self, _signum: int, _frame: FrameType | None) -> None:
        self._signal_group(signal.SIGKILL)

    def _signal_group(self, signum: int) -> None:
        for child in self.children:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signum)

    @property
    def stopping(self) -> bool:
        return self.stop_signal is not None or self.run.cancel.exists()

    # ------------------------------------------------------------------ steps

    def save(self, **changes: Any) -> None:
        self.record.update(changes)
        write_record(self.run.job, self.record)

    def wait_for_gpus(self) -> list[str] | None:
        """The devices granted, or None when the job was cancelled while waiting."""
        count = int(self.spec["gpus"]) * self.nodes
        if count == 0:
            return []
        devices: list[str] = self.spec["gpu_devices"]
        while not self.stopping:
            grant = self.ledger.try_acquire(self.job_id, count, devices)
            if grant.devices is not None:
                return grant.devices
            message = waiting_message(count, grant)
            if self.record["state"] != "queued" or self.record["message"] != message:
                self.save(state="queued", message=message)
            time.sleep(_GPU_POLL_S)
        self.ledger.release()
        return None

    def child_env(self, gpus: list[str], rank: int = 0) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.spec["env"])
        env.update(
            J2C_JOB_ID=self.job_id,
            J2C_OUTPUT_DIR=str(self.run.rank_outputs(rank)),
            CUDA_VISIBLE_DEVICES=",".join(gpus),
        )
        if self.nodes > 1:
            # The ranks meet on this machine; j2c-unpack derives the rest (unpack/ranks.py).
            env.update(
                J2C_NODE_RANK=str(rank),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(self.spec["master_port"]),
            )
        return env

    def start_child(self, gpus: list[str]) -> subprocess.Popen[bytes] | None:
        """Start the job (every rank), or say in a log why it cannot start and return None."""
        per_rank = len(gpus) // self.nodes
        for rank in range(self.nodes):
            if rank:
                private_dir(self.run.rank_outputs(rank))
            with open(self.run.rank_log(rank), "ab", buffering=0, opener=private_opener) as log:
                try:
                    child = subprocess.Popen(
                        self.spec["command"],
                        cwd=self.run.work,
                        env=self.child_env(gpus[rank * per_rank : (rank + 1) * per_rank], rank),
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                except OSError as exc:
                    tag = self.spec["env"].get(TAG_ENV)  # j2c's line, as j2c-unpack's are
                    said = f"cannot start {self.spec['command'][0]!r}: {exc}"
                    log.write((format_line(tag, "error", "start", said) + "\n").encode())
                    self._signal_group(signal.SIGKILL)  # no job runs with a rank missing
                    return None
            self.children.append(child)
        processes = [
            {"pid": child.pid, "start_time": process_start_time(child.pid)}
            for child in self.children
        ]
        self.save(
            state="running",
            message=None,
            gpus=gpus,
            child=processes[0],
            ranks=processes,
            started_at=time.time(),
        )
        if self.stopping and not self.stop_sent:  # cancelled while the job was being started
            self.stop_signal = self.stop_signal or signal.SIGTERM
            self._stop_child(self.stop_signal)
        return self.children[0]

    def wait_child(self, child: subprocess.Popen[bytes]) -> int:
        if self.nodes > 1:
            return self.wait_ranks()
        try:
            code = child.wait(timeout=self.spec["time_limit_s"])
        except subprocess.TimeoutExpired:
            self.timed_out = True
            if not self.stop_sent:
                self._stop_child(signal.SIGTERM)
            code = child.wait()
        signal.setitimer(signal.ITIMER_REAL, 0)
        # The job's processes end with it: nothing it left behind keeps running on its GPUs.
        self._signal_group(signal.SIGKILL)
        return code

    def wait_ranks(self) -> int:
        """Wait for every rank; the first to fail stops the others (a rank alone would wait
        for its peers forever). The job's code: the first non-zero rank's, else 0."""
        limit = self.spec["time_limit_s"]
        deadline = time.monotonic() + limit if limit else None
        live = set(range(self.nodes))
        while live:
            for rank in sorted(live):
                code = self.children[rank].poll()
                if code is None:
                    continue
                live.discard(rank)
                self.rank_codes.append((rank, code))
                if code != 0 and not self.stop_sent:
                    self._stop_child(signal.SIGTERM)
            if deadline is not None and not self.timed_out and time.monotonic() > deadline:
                self.timed_out = True
                if not self.stop_sent:
                    self._stop_child(signal.SIGTERM)
            if live:
                time.sleep(_RANK_POLL_S)
        signal.setitimer(signal.ITIMER_REAL, 0)
        self._signal_group(signal.SIGKILL)
        return next((code for _, code in self.rank_codes if code != 0), 0)

    def finish(self, code: int | None, *, error: str | None = None) -> None:
        signum = -code if code is not None and code < 0 else None
        if self.timed_out:
            error = timed_out(self.spec["time_limit_s"] / 60)
        elif code and not error and not self.stopping:
            error = _disk_full(self.run.path, self.disk.stop() if self.disk else None)
        ranks: dict[str, Any] = {}
        if self.nodes > 1 and self.rank_codes:
            failed = next((rank for rank, raw in self.rank_codes if raw != 0), None)
            ranks = {
                "ranks": [{"rank": rank, "exit_code": raw} for rank, raw in self.rank_codes],
                "failed_rank": failed,
            }
        write_record(
            self.run.exit,
            {
                **ranks,
                "exit_code": 128 + signum if signum is not None else code,
                "signal": signal.Signals(signum).name if signum is not None else None,
                "cancelled": self.stopping,
                "timed_out": self.timed_out,
                "error": error,
                "started_at": self.record["started_at"],
                "ended_at": time.time(),
            },
        )

    def main(self) -> None:
        self.install_signal_handlers()
        self.save()
        try:
            gpus = self.wait_for_gpus()
        except LedgerError as exc:
            self.finish(_CANNOT_START, error=str(exc))
            return
        try:
            if gpus is None or self.stopping:
                self.finish(None)  # cancelled before it started
                return
            child = self.start_child(gpus)
            if child is None:
                self.finish(_CANNOT_START, error="the command could not be started")
            else:
                self.disk = DiskWatch(self.run.path)
                self.finish(self.wait_child(child))
        finally:
            self.ledger.release()


def _detach() -> None:
    """Fork once more and let the parent exit: the scheduler reaps it at once, and the
    supervisor is adopted by init, so it outlives the server and never lingers as its zombie."""
    if os.fork() > 0:
        os._exit(0)


def main(argv: list[str] | None = None) -> None:
    run_dir, lock_fd = argv if argv is not None else sys.argv[1:]
    _detach()
    os.set_inheritable(int(lock_fd), False)  # only this process holds the run alive
    Supervisor(RunDir(Path(run_dir))).main()


def _disk_full(folder: Path, lowest: int | None = None) -> str | None:
    """Why a failed job may say nothing: the disk of its folder (its log, its work folder) was
    full when it ended, or at some moment while it ran (``lowest``: the least free space the
    supervisor saw), so even its last words could not be written."""
    try:
        stat = os.statvfs(folder)
    except OSError:
        return None
    free = stat.f_bavail * stat.f_frsize
    if free < DISK_FULL_BYTES:
        when = "when it ended"
    elif lowest is not None and lowest < DISK_FULL_BYTES:
        free, when = lowest, "at the lowest while it ran"
    else:
        return None
    return (
        f"the disk holding the job's folder {folder} was full ({count(free, 'byte')} free "
        f"{when}): its log and what it wrote may be cut short"
    )


if __name__ == "__main__":
    main()
