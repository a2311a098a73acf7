"""j2c's own lines in a job's log, told from the job's by a per-job tag: written in the job
(j2c-unpack, the notebook runner, the local supervisor, the Slurm batch script), read once by
the watch stage, which strips the tag and stores the line as j2c's, with its level and phase.

A job's log mixes the entry point's output with j2c's diary (``downloading``, ``running``,
``summary``, ...). Whose line it is must not be guessed from how it starts: a user's
``print("j2c: done")`` is the user's. j2c's writers are given a tag in ``$J2C_LINE_TAG`` and
write ``j2c[<tag>] <level> <phase>: <message>``; j2c-unpack takes the variable out of the
environment before the entry point starts, so the job's own code does not hand it on. The tag is
not a secret (anyone who reads the job's environment can write a j2c line): it keeps a line
from passing as j2c's by accident, as when a job prints another job's log.

A job's tag is derived from its id (a sweep's variants: their parent's, as an array job has one
environment for all its tasks), so any process that follows the job computes it without
storing it. Without a tag (j2c-unpack run by hand) lines read ``j2c: <phase>: <message>``, as a
person would write them, and are the job's output to whoever follows it.

Standard library only: j2c-unpack's start-up path imports this.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from typing import Final, Literal, cast

TAG_ENV: Final = "J2C_LINE_TAG"
Level = Literal["info", "warning", "error"]
LEVELS: Final[tuple[Level, ...]] = ("info", "warning", "error")
_TAG_CHARS = 12
_TAG_RE: Final = re.compile(r"[0-9a-f]{12}")
# ``<level> <phase>: <message>`` after ``j2c[<tag>] ``; a phase never holds ": ".
_BODY_RE: Final = re.compile(r"(info|warning|error) ([a-z][a-z0-9 _-]{0,40}?): (.*)", re.DOTALL)


@dataclass(frozen=True, slots=True)
class J2CLine:
    """One of j2c's lines, its tag stripped."""

    level: Level
    phase: str  # j2c-unpack's phase ("downloading", "running", ...) or the writer's own name
    text: str  # the message, without tag, level or phase


def line_tag(job_id: str, parent_id: str | None = None) -> str:
    """The tag of a job's j2c lines (a sweep's variant: ``parent_id``, the sweep's)."""
    owner = parent_id or job_id
    return hashlib.sha256(f"j2c line tag\0{owner}".encode()).hexdigest()[:_TAG_CHARS]


def level_named(name: object) -> Level:
    """``name`` as a level; anything else (absent, unknown) is info."""
    for level in LEVELS:
        if level == name:
            return level
    return "info"


def valid_tag(tag: str | None) -> bool:
    return tag is not None and _TAG_RE.fullmatch(tag) is not None


def tag_from_env(environ: dict[str, str] | None = None) -> str | None:
    """``$J2C_LINE_TAG``, taken out of the environment (``os.environ`` by default) so that no
    process started later inherits it; None when absent or not a tag."""
    env = os.environ if environ is None else environ
    tag = env.pop(TAG_ENV, None)
    return tag if valid_tag(tag) else None


def format_line(tag: str | None, level: Level, phase: str, message: str) -> str:
    """The line as written into the job's log (no newline)."""
    if tag is None:  # read by a person: the level shows in the words
        return f"j2c: {phase}: {message}"
    return f"j2c[{tag}] {level} {phase}: {message}"


def parse_line(text: str, tag: str) -> J2CLine | None:
    """``text`` as j2c's line when it carries ``tag``; None when it is the job's own."""
    head = f"j2c[{tag}] "
    if not text.startswith(head):
        return None
    match = _BODY_RE.fullmatch(text, len(head))
    if match is None:
        return None
    level, phase, message = match.groups()
    return J2CLine(cast(Level, level), phase, message)
