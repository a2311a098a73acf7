"""The on-disk record of one local run, shared by the local scheduler and its supervisor.

A run lives in ``<data>/runs/<job id>/``; every file in it has one writer:

- ``spec.json``      what to run: key, command, the spec's env, GPUs (the scheduler, at submit)
- ``job.json``       supervisor and child PIDs with their start times, state, message (supervisor)
- ``job.lock``       flock-held by the supervisor for as long as it lives: the liveness test, which
                     PID reuse cannot fool and which needs no server
- ``cancel``         present once a cancel was asked for (the scheduler)
- ``exit.json``      exit code, signal, cancelled flag and times, written atomically at the end
                     (supervisor)
- ``output.log``     the job's stdout and stderr, interleaved as written (the job; of a
                     multi-node job, rank 0; rank k writes ``output.rank-k.log``)
- ``outputs/``       ``$J2C_OUTPUT_DIR`` (the job)
- ``work/``          the job's working directory (the job)
- ``supervisor.log`` the supervisor's own diagnostics (supervisor)

This module is imported by the supervisor, so it stays on the standard library.

"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

RUNS_DIR = "runs"


@dataclass(frozen=True)
class RunDir:
    """Paths of one run's files."""

    path: Path

    @property
    def spec(self) -> Path:
        return self.path / "spec.json"

    @property
    def job(self) -> Path:
        return self.path / "job.json"

    @property
    def lock(self) -> Path:
        return self.path / "job.lock"

    @property
    def cancel(self) -> Path:
        return self.path / "cancel"

    @property
    def exit(self) -> Path:
        return self.path / "exit.json"

    @property
    def log(self) -> Path:
        return self.path / "output.log"

    def rank_log(self, rank: int) -> Path:
        return self.log if rank == 0 else self.path / f"output.rank-{rank}.log"

    def rank_outputs(self, rank: int) -> Path:
        """``$J2C_OUTPUT_DIR`` of a rank: the job's outputs are rank 0's."""
        return self.outputs if rank == 0 else self.path / "ranks" / str(rank) / "outputs"

    @property
    def outputs(self) -> Path:
        return self.path / "outputs"

    @property
    def work(self) -> Path:
        return self.path / "work"

    @property
    def supervisor_log(self) -> Path:
        return self.path / "supervisor.log"
