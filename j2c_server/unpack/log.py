"""j2c-unpack's own messages: one line each on stderr, tagged as j2c's (core/j2c_lines.py).

The entry point's output never passes through here (it inherits the job's stdout and stderr);
these lines are the only thing j2c-unpack adds to a job's log, so each one says which phase
it belongs to, how bad it is (info, warning, error) and, when a phase ends, how long it took.
The server that follows the job knows them by the tag it gave the job in ``$J2C_LINE_TAG``
(:func:`take_tag`, before anything is said) and stores them as j2c's, not the job's; without a
tag they read ``j2c: <phase>: <message>``.
"""

from __future__ import annotations

import sys
import threading
import time

from j2c_server.core.j2c_lines import Level, format_line, tag_from_env
from j2c_server.unpack import summary

_one_line_at_a_time = threading.Lock()  # downloads report from several threads
_tag: list[str | None] = [None]  # this job's tag, once taken


def take_tag() -> str | None:
    """This job's tag, taken out of the environment: the entry point does not inherit it (the
    notebook runner, j2c's own, is handed it: :func:`tag`)."""
    _tag[0] = tag_from_env()
    return _tag[0]


def tag() -> str | None:
    return _tag[0]


def say(stage: str, message: str, level: Level = "info") -> None:
    line = format_line(_tag[0], level, stage, message)
    with _one_line_at_a_time:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


def warn(stage: str, message: str) -> None:
    say(stage, message, "warning")


def error(stage: str, message: str) -> None:
    say(stage, message, "error")


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
