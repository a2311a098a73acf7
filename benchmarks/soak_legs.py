"""The chaos soak's engines and its full disk (benchmarks/soak.py): where the jobs run beside the
local backend, and a data dir that can run out of space.

- ``ContainerLeg``: the jobs run as podman containers of the platform image through the
  ``container`` backend: the engine named by ``J2C_SCHEDULER__CONTAINER__SOCKET`` and
  ``PLATFORM_IMAGE`` in the environment (the tests' podman fixture), else ``$J2C_PODMAN_DIR``'s
  service, else ``scripts/platform-image.sh`` started for this run and stopped after it. What
  it leaves: this server's containers still on the engine (by the runs label every j2c
  container carries); with ``keep_finished`` off that must be none once every job's results
  are in.
- ``SlurmLeg``: the jobs run on a real Slurm through slurmrestd: the one exported settings name
  (``J2C_SCHEDULER__SLURM__URL`` ..., ``SLURM_CONF``), else ``$J2C_SLURM_DIR``'s cluster, else
  ``scripts/slurm-up.sh`` started for this run and ``scripts/slurm-down.sh`` after it.
  What it leaves: the soak's jobs still in ``squeue``.
- ``DiskLeg``: the data dir (registry, layer cache, ``file://`` store, runs, usage records) on a
  tmpfs of a fixed size; ``fill`` takes every free byte with a ballast file for a moment, then
  frees it. Mounting needs root (``CAP_SYS_ADMIN``); ``DiskLeg.mount`` says why it cannot.

Each leg sets the settings of the server (and so of its jobs) in this process's environment,
which the soak's server inherits; the local leg needs none.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NOT_INSTALLABLE = 2  # the scripts' exit code when their service cannot be installed here
SLURM = "J2C_SCHEDULER__SLURM__"  # the Slurm backend's settings, as scripts/slurm-up.sh exports
SLURM_ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}


class LegUnavailable(RuntimeError):
    """This machine cannot run the leg (the reason is the message); exit code 2."""


def _exports(text: str) -> dict[str, str]:
    from tests.support.exports import parse_exports

    return parse_exports(text)


def _start(script: list[str], what: str) -> dict[str, str]:
    done = subprocess.run(script, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode == NOT_INSTALLABLE:
        reason = (done.stderr.strip().splitlines() or ["no reason given"])[-1]
        raise LegUnavailable(f"no {what} here: {reason}")
    if done.returncode != 0:
        raise RuntimeError(f"{script[0]} failed:\n{done.stderr[-3000:]}")
    return _exports(done.stdout)


class ContainerLeg:
    """The ``container`` backend on podman; ``leftovers`` names this server's containers."""

    name = "container"

    def __init__(self, tmp: Path, data: Path) -> None:
        given = Path(os.environ.get("J2C_PODMAN_DIR") or "/nonexistent") / "env"
        self.folder: Path | None = None
        exported = ("CONTAINERS_CONF", "J2C_SCHEDULER__CONTAINER__SOCKET", "PLATFORM_IMAGE")
        if all(os.environ.get(name) for name in exported):
            values = {name: os.environ[name] for name in exported}
        elif given.is_file():
            values = _exports(given.read_text())
        else:
            self.folder = tmp / "podman"
            script = REPO / "scripts" / "platform-image.sh"
            values = _start(["bash", str(script), str(self.folder)], "podman")
        self.socket = values["J2C_SCHEDULER__CONTAINER__SOCKET"]
        from j2c_server.schedulers.container.lifecycle import LABEL_RUNS, runs_label

        # The backend's default runs folder (container_spec.runs_root): <data dir>/containers.
        self.label = f"{LABEL_RUNS}={runs_label((data / 'containers').absolute())}"
        os.environ.update(
            {
                "CONTAINERS_CONF": values["CONTAINERS_CONF"],
                "J2C_SCHEDULER__DEFAULT": "container",
                "J2C_SCHEDULER__CONTAINER__SOCKET": self.socket,
                "J2C_SCHEDULER__CONTAINER__CANCEL_GRACE_S": "2",
                "J2C_DEFAULT_IMAGE": values["PLATFORM_IMAGE"],
                # The server runs as root, its jobs as the default non-root uid.
                "J2C_STORAGE__SHARED": "true",
            }
        )

    def leftovers(self) -> list[str]:
        """This server's containers on the engine, in any state: 'name (state)'. An image probe
        that a killed server left is removed by the first start of a server past
        ``PROBE_ORPHAN_S`` (it may be a live probe until then): counted once that old."""
        import time

        import httpx

        from j2c_server.schedulers.container.lifecycle import PROBE_ORPHAN_S, PROBE_PREFIX

        transport = httpx.HTTPTransport(uds=self.socket)
        with httpx.Client(transport=transport, base_url="http://engine", timeout=30) as client:
            params = {"all": "1", "filters": json.dumps({"label": [self.label]})}
            listed = client.get("/v1.41/containers/json", params=params).json()
        left = []
        for c in listed:
            name = (c.get("Names") or ["?"])[0].lstrip("/")
            young = time.time() - float(c.get("Created") or 0) <= PROBE_ORPHAN_S
            if not (name.startswith(PROBE_PREFIX) and young):
                left.append(f"{name} ({c.get('State')})")
        return left

    def stop(self) -> None:
        if self.folder is not None:
            script = REPO / "scripts" / "platform-image.sh"
            subprocess.run(["bash", str(script), str(self.folder), "--stop"], check=False)


class SlurmLeg:
    """The ``slurm`` backend on a real Slurm; ``leftovers`` names the soak's jobs in squeue."""

    name = "slurm"

    def __init__(self, tmp: Path) -> None:
        given = Path(os.environ.get("J2C_SLURM_DIR") or "/nonexistent") / "env"
        self.folder: Path | None = None
        if os.environ.get(f"{SLURM}URL"):
            values = {}
        elif given.is_file():
            values = _exports(given.read_text())
        else:
            self.folder = tmp / "slurm"
            values = _start([str(REPO / "scripts" / "slurm-up.sh"), str(self.folder)], "Slurm")
        os.environ.update(values)
        # The node is this machine: its jobs find this venv's j2c-unpack, and share the store.
        os.environ.setdefault(f"{SLURM}ENV__PATH", f"{Path(sys.executable).parent}:/usr/bin:/bin")
        os.environ.update(
            {
                "J2C_SCHEDULER__DEFAULT": "slurm",
                f"{SLURM}CANCEL_GRACE_S": "1",
                "J2C_STORAGE__SHARED": "true",
            }
        )

    def leftovers(self, handles: set[str]) -> list[str]:
        """The Slurm jobs among ``handles`` (the soak's jobs' ids there) not yet ended, as
        slurmrestd lists them: 'id (state)'."""
        import httpx

        token = (
            os.environ.get(f"{SLURM}TOKEN")
            or Path(os.environ[f"{SLURM}TOKEN_FILE"]).read_text().strip()
        )
        headers = {
            "X-SLURM-USER-NAME": os.environ.get(f"{SLURM}USER", "root"),
            "X-SLURM-USER-TOKEN": token,
        }
        url = f"{os.environ[f'{SLURM}URL'].rstrip('/')}/slurm/v0.0.38/jobs"
        listed = httpx.get(url, headers=headers, timeout=30).json().get("jobs") or []
        return [
            f"{job['job_id']} ({job.get('job_state')})"
            for job in listed
            if str(job.get("job_id")) in handles and job.get("job_state") not in SLURM_ENDED
        ]

    def stop(self) -> None:
        if self.folder is not None:
            down = REPO / "scripts" / "slurm-down.sh"
            subprocess.run([str(down), str(self.folder)], check=False, timeout=120)


class DiskLeg:
    """The data dir on a tmpfs of ``size_mb``; ``fill`` takes all its space for a moment."""

    def __init__(self, data: Path, size_mb: int) -> None:
        self.data = data
        self.size_mb = size_mb
        self.ballast = data / "ballast"
        self.fills: list[tuple[int, float]] = []  # (bytes taken, seconds held)

    def mount(self) -> None:
        """Mount the tmpfs on the (empty) data dir; LegUnavailable says why it cannot."""
        from tests.support.full_disk import mount_tmpfs

        if (reason := mount_tmpfs(self.data, self.size_mb)) is not None:
            raise LegUnavailable(f"no full-disk fault: {reason}")

    def unmount(self) -> None:
        from tests.support.full_disk import unmount

        unmount(self.data)

    async def fill(self, hold_s: float) -> int:
        """Take every free byte for ``hold_s`` seconds, then give them back; the bytes taken."""
        from tests.support.full_disk import take_all_space

        taken = take_all_space(self.ballast)
        began = time.monotonic()
        await asyncio.sleep(hold_s)
        self.ballast.unlink()
        self.fills.append((taken, time.monotonic() - began))
        return taken
