"""How j2c writes quantities in its messages: sizes in decimal units (B, kB, MB, GB, TB, as the
UI's ``src/format.ts``), durations, counted nouns and a time limit reached. Standard library
only: j2c-unpack imports it too."""

from __future__ import annotations

_LARGER_UNITS = ("kB", "MB", "GB")


def byte_size(nbytes: float) -> str:
    """``1234567`` → ``"1.2 MB"``; whole bytes under a kilobyte (``"512 B"``)."""
    value = float(nbytes)
    if abs(value) < 1000:
        return f"{value:.0f} B"
    for unit in _LARGER_UNITS:
        value /= 1000
        if abs(value) < 1000:
            return f"{value:.1f} {unit}"
    return f"{value / 1000:.1f} TB"


def count(number: int, noun: str) -> str:
    """``count(1, "file")`` → ``"1 file"``, ``count(3, "file")`` → ``"3 files"``."""
    return f"{number} {noun}" + ("" if number == 1 else "s")


def duration(seconds: float) -> str:
    """``4.2 s``, ``42 s``, ``3 min 05 s``, ``2 h 07 min`` (as ``formatDuration`` in the UI)."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{round(seconds)} s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def timed_out(minutes: float) -> str:
    """What every backend says of a job stopped at its time limit: ``timed out after 30 min``.

    One wording on every scheduler (the status stays ``failed``: a time limit is one way of
    failing, and each front end already explains ``failed`` with its message)."""
    return f"timed out after {minutes:g} min"
