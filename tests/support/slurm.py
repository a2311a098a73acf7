"""A real Slurm for the tests marked ``slurm``.

When ``scripts/slurm-up.sh``'s settings are exported (``eval "$(scripts/slurm-up.sh DIR)"``, so
``J2C_SCHEDULER__SLURM__URL`` is set) or only ``J2C_SLURM_DIR`` is (CI: the tests then read
``DIR/env``, and pytest's own environment stays free of j2c settings), that cluster is used;
otherwise ``scripts/slurm-up.sh`` starts a throw-away one for the session
(installing Slurm from Debian packages if needed) and ``scripts/slurm-down.sh`` stops it at the
end. The tests are skipped, with the script's reason, only when Slurm cannot be installed here,
and fail instead under CI (tests/support/ci.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from j2c_server.config import J2CSettings
from tests.support.ci import engine_missing
from tests.support.exports import parse_exports, started_service

REPO = Path(__file__).resolve().parents[2]
SLURM_UP = REPO / "scripts" / "slurm-up.sh"
SLURM_DOWN = REPO / "scripts" / "slurm-down.sh"


@dataclass
class SlurmCluster:
    url: str
    user: str
    token: str
    job_dir: Path
    dir: Path | None  # where slurm-up.sh put it; None when it is not known
    conf: str | None  # SLURM_CONF, for the command-line tools

    def settings(self, **slurm: Any) -> J2CSettings:
        """Settings that point the ``slurm`` backend at this cluster; keywords override
        ``scheduler.slurm`` keys. Its node is this machine: a file:// store is shared."""
        values: dict[str, Any] = {
            "url": self.url,
            "user": self.user,
            "token": self.token,
            "job_dir": str(self.job_dir),
            "cancel_grace_s": 1.0,
        }
        values.update(slurm)
        return J2CSettings.model_validate(
            {"storage": {"shared": True}, "scheduler": {"slurm": values}}
        )

    def stop_restd(self) -> None:
        """Stop only slurmrestd (slurmctld, slurmd and the jobs keep running)."""
        subprocess.run([SLURM_DOWN, self._dir(), "--restrd-only"], check=True, timeout=30)

    def start_restd(self) -> None:
        subprocess.run(
            [SLURM_UP, self._dir(), "--restrd-only"],
            check=True,
            timeout=30,
            stdout=subprocess.DEVNULL,
        )

    def scancel(self, job_ids: list[str]) -> None:
        """Remove jobs a failed test left behind (best effort)."""
        if job_ids and self.conf and shutil.which("scancel"):
            subprocess.run(
                ["scancel", *job_ids],
                env={**os.environ, "SLURM_CONF": self.conf},
                timeout=30,
                check=False,
                capture_output=True,
            )

    def _dir(self) -> Path:
        if self.dir is None:
            engine_missing("J2C_SLURM_DIR is not exported: slurmrestd cannot be restarted")
        return self.dir


SETTING = "J2C_SCHEDULER__SLURM__"


def _from_exports(values: dict[str, str]) -> SlurmCluster:
    token = values.get(f"{SETTING}TOKEN")
    if not token:
        token = Path(values[f"{SETTING}TOKEN_FILE"]).read_text().strip()
    directory = values.get("J2C_SLURM_DIR")
    return SlurmCluster(
        url=values[f"{SETTING}URL"],
        user=values.get(f"{SETTING}USER", "root"),
        token=token,
        job_dir=Path(values[f"{SETTING}JOB_DIR"]),
        dir=Path(directory) if directory else None,
        conf=values.get("SLURM_CONF"),
    )


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    if os.environ.get(f"{SETTING}URL"):
        yield _from_exports(dict(os.environ))
        return
    exported = Path(os.environ.get("J2C_SLURM_DIR") or "/nonexistent") / "env"
    if exported.is_file():
        yield _from_exports(parse_exports(exported.read_text()))
        return
    with started_service(SLURM_UP, SLURM_DOWN, "Slurm") as exports:
        yield _from_exports(exports)
