"""The chaos soak's engines and its full disk (benchmarks/soak.py): where the jobs run beside the
local backend, and a data dir that can run out of space.

- ``S3Leg``: the store is a real moto S3 server behind the fault proxy
  (``tests/storage/fault_proxy.py``) that the server and every job go through. For container
  jobs the proxy listens on this machine's own address (a container's loopback is its own);
  container and Slurm jobs, which inherit nothing of the server's environment, get the store's
  keys as a credentials file, as an operator gives them (``credentials_dir``; ``env`` naming
  ``AWS_SHARED_CREDENTIALS_FILE``).
- ``ContainerLeg``: the jobs run as podman containers of the platform image through the
  ``container`` backend: the engine named by ``J2C_SCHEDULER__CONTAINER__SOCKET`` and
  ``PLATFORM_IMAGE`` in the environment (the tests' podman fixture), else ``$J2C_PODMAN_DIR``'s
  service, else ``scripts/platform-image.sh`` started for this run and stopped after it. What
  it leaves: every container on the engine that j2c's labels tie to this run (this server's
  runs label, or a job id the server lists), in any state; with ``keep_finished`` off that
  must be none once every job's results are in.
- ``SlurmLeg``: the jobs run on a real Slurm through slurmrestd: the one exported settings name
  (``J2C_SCHEDULER__SLURM__URL`` ..., ``SLURM_CONF``), else ``$J2C_SLURM_DIR``'s cluster, else
  ``scripts/slurm-up.sh`` started for this run and ``scripts/slurm-down.sh`` after it.
  What it leaves: every job in the controller's queue whose j2c comment names one of the
  server's jobs, not yet ended (whatever handle the registry recorded).
- ``DiskLeg``: the data dir (registry, layer cache, ``file://`` store, runs, usage records) on a
  tmpfs of a fixed size; ``fill`` takes every free byte with a ballast file for a moment, then
  frees it. Mounting needs root (``CAP_SYS_ADMIN``); ``DiskLeg.mount`` says why it cannot.

Each leg sets the settings of the server (and so of its jobs) in this process's environment,
which the soak's server inherits; the local leg needs none. The engines' legs do not change the
default backend: each send names its own (several backends can run in one soak).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NOT_INSTALLABLE = 2  # the scripts' exit code when their service cannot be installed here
SLURM = "J2C_SCHEDULER__SLURM__"  # the Slurm backend's settings, as scripts/slurm-up.sh exports
SLURM_ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}
BUCKET, PREFIX = "soak", "j2c"


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


class S3Leg:
    """A moto S3 server, its bucket and the fault proxy in front of it; the server's and the
    jobs' settings point at the proxy (the environment the server and its jobs inherit). For
    the ``engines`` (container, slurm) ``credentials`` (a folder inside this user's home, as the
    container backend asks of a rootful engine) holds the keys; with containers the proxy
    listens on this machine's address."""

    def __init__(self, seed: int, *, engines: frozenset[str] = frozenset()) -> None:
        import boto3
        from botocore.config import Config
        from moto.server import ThreadedMotoServer

        from tests.storage.fault_proxy import FaultProxy

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's line per request
        self.moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.moto.start()
        host, port = self.moto.get_host_and_port()
        keys = {
            "AWS_ACCESS_KEY_ID": "AKIAJ2CSOAKFAKEKEY00",
            "AWS_SECRET_ACCESS_KEY": "j2c-soak-fake-secret",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
        os.environ.update(keys)
        self.client = boto3.client(
            "s3",
            endpoint_url=f"http://{host}:{port}",
            config=Config(s3={"addressing_style": "path"}),
        )
        self.client.create_bucket(Bucket=BUCKET)
        listen = own_address() if "container" in engines else "127.0.0.1"
        self.proxy = FaultProxy(f"http://{host}:{port}", seed=seed, host=listen).start()
        self.credentials: Path | None = None
        if engines:
            self.credentials = Path.home() / ".cache" / f"j2c-soak-{os.getpid()}"
            self.credentials.mkdir(parents=True, exist_ok=True)
            self.credentials.chmod(0o755)  # read by the job's uid through the bind
            (self.credentials / "credentials").write_text(
                "[default]\n"
                f"aws_access_key_id = {keys['AWS_ACCESS_KEY_ID']}\n"
                f"aws_secret_access_key = {keys['AWS_SECRET_ACCESS_KEY']}\n"
            )
            (self.credentials / "credentials").chmod(0o644)
        if "container" in engines:
            os.environ["J2C_SCHEDULER__CONTAINER__CREDENTIALS_DIR"] = str(self.credentials)
        if "slurm" in engines:
            file = str(self.credentials / "credentials")
            os.environ[f"{SLURM}ENV__AWS_SHARED_CREDENTIALS_FILE"] = file
        os.environ.update(
            {
                "J2C_STORAGE__URL": f"s3://{BUCKET}/{PREFIX}",
                "J2C_STORAGE__ENDPOINT_URL": self.proxy.url,
                "J2C_STORAGE__ADDRESSING_STYLE": "path",
                "J2C_STORAGE__REGION": "us-east-1",
            }
        )

    def keys(self, prefix: str) -> list[str]:
        pages = self.client.get_paginator("list_objects_v2")
        found = pages.paginate(Bucket=BUCKET, Prefix=f"{PREFIX}/{prefix}")
        return [item["Key"] for page in found for item in page.get("Contents", [])]

    def read(self, key: str) -> bytes:
        body: bytes = self.client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        return body

    def open_uploads(self) -> int:
        return len(self.client.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []))

    def stop(self) -> None:
        self.proxy.stop()
        self.moto.stop()
        if self.credentials is not None:
            for item in self.credentials.iterdir():
                item.unlink()
            self.credentials.rmdir()


def own_address() -> str:
    """This machine's address on its default route (what a container on the engine's bridge
    reaches the host at); no packet is sent."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # TEST-NET-1: routing only, never reached
        address: str = probe.getsockname()[0]
        return address


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
                "J2C_SCHEDULER__CONTAINER__SOCKET": self.socket,
                "J2C_SCHEDULER__CONTAINER__CANCEL_GRACE_S": "2",
                "J2C_DEFAULT_IMAGE": values["PLATFORM_IMAGE"],
                # The server runs as root, its jobs as the default non-root uid.
                "J2C_STORAGE__SHARED": "true",
            }
        )

    def leftovers(self, job_ids: set[str]) -> list[str]:
        """Every container j2c's labels tie to this run, in any state: this server's runs label,
        or a job id of ``job_ids`` (the server's jobs); 'name (state)'. An image probe that a
        killed server left is removed by the first start of a server past ``PROBE_ORPHAN_S``
        (it may be a live probe until then): counted once that old."""
        import httpx

        from j2c_server.schedulers.container.lifecycle import (
            LABEL_RUNS,
            PROBE_ORPHAN_S,
            PROBE_PREFIX,
        )
        from j2c_server.schedulers.container.spec import LABEL_JOB_ID, LABEL_MANAGED_BY

        transport = httpx.HTTPTransport(uds=self.socket)
        with httpx.Client(transport=transport, base_url="http://engine", timeout=30) as client:
            filters = json.dumps({"label": [f"{LABEL_MANAGED_BY}=j2c"]})
            listed = client.get("/v1.41/containers/json", params={"all": "1", "filters": filters})
            listed.raise_for_status()
        left = []
        for c in listed.json():
            labels = c.get("Labels") or {}
            ours = labels.get(LABEL_RUNS) == self.label.split("=", 1)[1]
            if not ours and labels.get(LABEL_JOB_ID) not in job_ids:
                continue
            name = (c.get("Names") or ["?"])[0].lstrip("/")
            young = time.time() - float(c.get("Created") or 0) <= PROBE_ORPHAN_S
            if not (name.startswith(PROBE_PREFIX) and young):
                job = labels.get(LABEL_JOB_ID)
                left.append(f"container {name} of job {job} ({c.get('State')})")
        return left

    def sweep_probes(self) -> int:
        """Remove the image probes this server's killed incarnations left (j2c sweeps one at
        the first server start past ``PROBE_ORPHAN_S``; the soak's last server is gone by then):
        how many there were. Called after the check, so the engine is left clean."""
        import httpx

        from j2c_server.schedulers.container.lifecycle import PROBE_PREFIX

        transport = httpx.HTTPTransport(uds=self.socket)
        with httpx.Client(transport=transport, base_url="http://engine", timeout=60) as client:
            params = {"all": "1", "filters": json.dumps({"label": [self.label]})}
            listed = client.get("/v1.41/containers/json", params=params)
            listed.raise_for_status()
            probes = [
                c["Id"]
                for c in listed.json()
                if (c.get("Names") or ["?"])[0].lstrip("/").startswith(PROBE_PREFIX)
            ]
            for probe in probes:
                client.delete(f"/v1.41/containers/{probe}", params={"force": "1"})
        return len(probes)

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
                f"{SLURM}CANCEL_GRACE_S": "1",
                "J2C_STORAGE__SHARED": "true",
            }
        )

    def leftovers(self, job_ids: set[str]) -> list[str]:
        """Every job in the controller's queue (slurmrestd's list, what ``squeue`` shows) whose
        j2c comment names one of ``job_ids`` and that has not ended: 'id name (state)'."""
        import httpx

        from j2c_server.schedulers.slurm.job import comment_fields

        token = (
            os.environ.get(f"{SLURM}TOKEN")
            or Path(os.environ[f"{SLURM}TOKEN_FILE"]).read_text().strip()
        )
        headers = {
            "X-SLURM-USER-NAME": os.environ.get(f"{SLURM}USER", "root"),
            "X-SLURM-USER-TOKEN": token,
        }
        url = f"{os.environ[f'{SLURM}URL'].rstrip('/')}/slurm/v0.0.38/jobs"
        answer = httpx.get(url, headers=headers, timeout=30)
        answer.raise_for_status()
        return [
            f"Slurm job {job['job_id']} {job.get('name')} of {fields.get('job')} "
            f"({job.get('job_state')})"
            for job in answer.json().get("jobs") or []
            if (fields := comment_fields(job.get("comment"))).get("job") in job_ids
            and job.get("job_state") not in SLURM_ENDED
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
