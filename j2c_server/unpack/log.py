"""j2c-unpack's own messages: one line each on stderr, ``j2c: <stage>: <what>``.

The entry point's output never passes through here (it inherits the job's stdout and stderr);
these lines are the only thing j2c-unpack adds to a job's log, so each one says which stage
it belongs to and, when a stage ends, how long it took.
"""

from __future__ import annotations

import sys
import threading
import time

from j2c_server.unpack import summary

_one_line_at_a_time = threading.Lock()  # downloads report from several threads


def say(stage: str, message: str) -> None:
    with _one_line_at_a_time:
        sys.stderr.write(f"j2c: {stage}: {message}\n")
        sys.stderr.flush()


class Stage:
    """A running stage: ``done()`` reports what it did and how long that took."""

    def __init__(self, name: str, starting: str | None = None) -> None:
        self.name = name
        self.started = time.monotonic()
        if starting:
            say(name, starting)

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.started

    def done(self, what: str) -> None:
        seconds = self.seconds
        summary.phase_done(self.name, seconds)
        say(self.name, f"{what} in {seconds:.2f} s")
