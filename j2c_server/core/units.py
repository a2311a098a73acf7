"""How j2c writes quantities in its messages: sizes in decimal units (B, kB, MB, GB, TB, as the
UI's ``src/format.ts``) and counted nouns. Standard library only: j2c-unpack imports it too."""

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
