"""Whether tests that run a process as another uid can: that process imports this checkout's
``j2c_server`` and runs its venv's Python, so every folder above the checkout must let other
users through (a clone under a 0700 folder such as ``mktemp -d`` or root's home cannot)."""

from __future__ import annotations

import stat
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def checkout_closed_to_others() -> str | None:
    """Why another uid cannot reach this checkout, or None when it can."""
    for folder in [REPO, *REPO.parents]:
        if not folder.stat().st_mode & stat.S_IXOTH:
            return (
                f"another uid cannot reach this checkout: {folder} is mode "
                f"{stat.S_IMODE(folder.stat().st_mode):o} (clone where other users can read)"
            )
    return None
