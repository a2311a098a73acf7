"""How the contract suite runs a tiny job on each backend: one :class:`Driver` per backend.

A driver is a backend's world as a job sees it: settings pointing the backend at a real
engine (or the fake API server), a ``file://`` store its jobs can read (the manifest of a
tiny stdlib-only project is published there; ``j2c-unpack`` uploads the outputs index back),
the ``j2c-unpack`` it finds (the backend's own ``unpack_command``, plus the PATH its jobs
need), and a folder shared with the job (``CONTRACT_DIR``) where the job notes each start
with its pid and waits for the gate files the test opens. ``still_running`` asks the backend's
world whether anything of a job is left.

Adding a backend to the contract is one entry in :data:`BACKENDS`: a function that yields a
:class:`Driver` (it may ask for the backend's own fixtures through ``request``), and its marks
in :data:`MARKS` when it needs one.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import secrets
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from j2c_server.config import J2CSettings, load_settings
from j2c_server.pack import PackSpec, make_manifest, pack, publish
from j2c_server.schedulers import discover, make_scheduler, scheduler_class
from j2c_server.schedulers.base import JobSpec, Scheduler
from j2c_server.schedulers.settings import scheduler_settings_model
from j2c_server.storage import open_store
from j2c_server.wire.api import JobHandle
from tests.contract.kubelet import running_kubelet
from tests.support.plugins import install_plugins
from tests.support.projects import write

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = str(Path(sys.executable).parent)
# The project every contract job runs: stdlib only, so any Python with j2c-unpack runs it.
JOB_PY = """\
import os, pathlib, sys, time

here = pathlib.Path(os.environ["CONTRACT_DIR"])
job = os.environ["J2C_JOB_ID"]
with open(here / f"{job}.starts", "a") as starts:
    starts.write(f"{os.getpid()}\\n")
lines, gate = int(sys.argv[1]), sys.argv[2]
for i in range(lines):
    print(f"line {i}", flush=True)
if gate != "-":
    while not (here / f"{job}.{gate}").exists():
        time.sleep(0.05)
    for i in range(lines, 2 * lines):
        print(f"line {i}", flush=True)
pathlib.Path(os.environ["J2C_OUTPUT_DIR"], "result.txt").write_text("done")
"""


@dataclass
class Driver:
    name: str
    settings: J2CSettings
    store: Path  # the file:// store's folder
    shared: Callable[[JobSpec], tuple[Path, str]]  # CONTRACT_DIR: (seen from here, from the job)
    env: dict[str, str] = field(default_factory=dict)  # what every job's env adds
    image: str | None = None
    alive: Callable[[JobSpec, JobHandle], Awaitable[bool]] | None = None  # else: by the pids
    manifest: str = ""  # the published project's, set by _project
    project: Path = Path()
    handles: list[JobHandle] = field(default_factory=list)

    def make(self) -> Scheduler:
        """A new scheduler object on the same settings: a restarted server."""
        return make_scheduler(self.name, self.settings)

    def spec(self, lines: int, gate: str = "-", *, job_id: str | None = None) -> JobSpec:
        """A job printing ``line 0..lines-1``, then (with a gate) waiting for the gate file and
        printing as many again, and writing ``result.txt`` to its outputs."""
        job_id = job_id or f"c{secrets.token_hex(5)}"
        outputs = f"{self.store.as_uri()}/jobs/{job_id}/outputs"
        unpack = scheduler_class(self.name).unpack_command(self.settings)
        spec = JobSpec(
            key=f"contract-{job_id}",
            job_id=job_id,
            name="contract",
            image=self.image,
            command=[*unpack, self.manifest, "--output-uri", outputs, "--", str(lines), gate],
            env={**self.env, "J2C_JOB_ID": job_id},
        )
        spec.env["CONTRACT_DIR"] = self.shared(spec)[1]
        return spec

    def open_gate(self, spec: JobSpec, gate: str) -> None:
        (self.shared(spec)[0] / f"{spec.job_id}.{gate}").touch()

    def starts(self, spec: JobSpec) -> list[int]:
        """The pids of every start of the job's program (one line per start)."""
        path = self.shared(spec)[0] / f"{spec.job_id}.starts"
        return [int(pid) for pid in path.read_text().split()] if path.exists() else []

    async def still_running(self, spec: JobSpec, handle: JobHandle) -> bool:
        if self.alive is not None:
            return await self.alive(spec, handle)
        return any(_alive(pid) for pid in self.starts(spec))


def _alive(pid: int) -> bool:
    """Running (a zombie is not: this machine's init may not reap orphans)."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def _kill_started(driver: Driver, folder: Path) -> None:
    """Whatever a failed test left running of its jobs' programs."""
    for starts in folder.glob("*.starts"):
        for pid in map(int, starts.read_text().split()):
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def _publish(driver: Driver, tmp: Path) -> None:
    """The tiny project packed and published to the driver's store, as the pipeline does
    (through the store the settings open: a ``storage.shared`` one writes readable files)."""
    project = tmp / "contract-project"
    write(project / "job.py", JOB_PY)
    result = pack(PackSpec(code_path=project, call_path="job.py"), tmp / "layer-cache")

    async def send() -> str:
        store = open_store(driver.settings.storage_url(), driver.settings.storage)
        try:
            return (await publish(store, result, make_manifest(result))).manifest_uri
        finally:
            await store.close()

    driver.project = project
    driver.manifest = asyncio.run(send())


def _in_folder(folder: Path) -> Callable[[JobSpec], tuple[Path, str]]:
    folder.mkdir(parents=True, exist_ok=True)
    return lambda spec: (folder, str(folder))


# --------------------------------------------------------------------------- the backends

DriverFactory = Callable[[pytest.FixtureRequest, Path], Iterator[Driver]]


def local_driver(request: pytest.FixtureRequest, tmp: Path) -> Iterator[Driver]:
    store = tmp / "store"
    settings = J2CSettings.model_validate(
        {
            "data_dir": str(tmp / "data"),
            "storage": {"url": store.as_uri()},
            "scheduler": {
                "local": {
                    "cancel_grace_s": 2.0,
                    "pass_env": ["PYTHONPATH"],  # this checkout's j2c_server
                },
                "gpu_ledger": str(tmp / "gpu-ledger"),
            },
        }
    )
    driver = Driver("local", settings, store, _in_folder(tmp / "shared"))
    _publish(driver, tmp)
    yield driver
    _kill_started(driver, tmp / "shared")


def slurm_driver(request: pytest.FixtureRequest, tmp: Path) -> Iterator[Driver]:
    from tests.support.slurm import SlurmCluster

    cluster: SlurmCluster = request.getfixturevalue("slurm_cluster")
    # The node is this machine: the store is shared, j2c-unpack is this venv's.
    shared = cluster.job_dir / f"contract-{secrets.token_hex(4)}"
    store = tmp / "store"
    settings = J2CSettings.model_validate(
        {
            "data_dir": str(tmp / "data"),
            "storage": {"url": store.as_uri(), "shared": True},
            "scheduler": {
                "slurm": {
                    "url": cluster.url,
                    "user": cluster.user,
                    "token": cluster.token,
                    "job_dir": str(cluster.job_dir),
                    "cancel_grace_s": 1.0,
                    "env": {"PATH": f"{VENV_BIN}:/usr/bin:/bin", "PYTHONPATH": str(REPO)},
                }
            },
        }
    )
    driver = Driver("slurm", settings, store, _in_folder(shared))
    _publish(driver, tmp)
    yield driver
    cluster.scancel([handle.id for handle in driver.handles])
    _kill_started(driver, shared)


def container_driver(request: pytest.FixtureRequest, tmp: Path) -> Iterator[Driver]:
    from j2c_server.schedulers.container.spec import HOME, job_folder
    from tests.support.podman import Podman

    podman: Podman = request.getfixturevalue("podman")
    store = tmp / "data" / "store"
    # Jobs run as another uid: storage.shared keeps the store readable by it.
    settings = load_settings(
        environ={},
        overrides={
            "data_dir": str(tmp / "data"),
            "storage": {"url": store.as_uri(), "shared": True},
            "scheduler": {"container": {"socket": podman.socket, "cancel_grace_s": 2}},
        },
    )

    def shared(spec: JobSpec) -> tuple[Path, str]:
        # The job's HOME is a host folder of its own, mounted read-write.
        return job_folder(settings, spec.key) / "home", HOME

    async def engine(method: str, path: str, **kwargs: Any) -> httpx.Response:
        transport = httpx.AsyncHTTPTransport(uds=podman.socket)
        async with httpx.AsyncClient(transport=transport, base_url="http://engine") as client:
            return await client.request(method, "/v1.41" + path, **kwargs)

    async def alive(spec: JobSpec, handle: JobHandle) -> bool:
        found = await engine("GET", f"/containers/{handle.id}/json")
        return found.status_code == 200 and bool(found.json()["State"]["Running"])

    driver = Driver("container", settings, store, shared, image=podman.image, alive=alive)
    _publish(driver, tmp)
    yield driver

    async def remove() -> None:
        for handle in driver.handles:
            await engine("DELETE", f"/containers/{handle.id}", params={"force": "1"})

    asyncio.run(remove())


def kubernetes_driver(request: pytest.FixtureRequest, tmp: Path) -> Iterator[Driver]:
    """The fake API server, because no real cluster runs here; :mod:`.kubelet` plays the node
    (this machine: the store is shared, the pods' processes are local)."""
    from tests.support.fake_kube import FakeKube, write_kubeconfig

    fake: FakeKube = request.getfixturevalue("fake_kube")
    store = tmp / "store"
    settings = J2CSettings.model_validate(
        {
            "data_dir": str(tmp / "data"),
            "storage": {"url": store.as_uri(), "shared": True},
            "scheduler": {
                "kubernetes": {
                    "kubeconfig": str(write_kubeconfig(tmp / "kubeconfig", fake)),
                    "poll_interval_s": 0.05,
                }
            },
        }
    )
    driver = Driver(
        "kubernetes", settings, store, _in_folder(tmp / "shared"), image="registry.example/j2c:1"
    )
    _publish(driver, tmp)
    with running_kubelet(fake):
        yield driver
    _kill_started(driver, tmp / "shared")


def ray_driver(request: pytest.FixtureRequest, tmp: Path) -> Iterator[Driver]:
    """The real one-node Ray head of ``scripts/ray-up.sh``: this machine, so the store and the
    shared folder are local; its jobs find this checkout's ``j2c-unpack`` beside ``ray``."""
    from tests.support.ray import RayHead

    head: RayHead = request.getfixturevalue("ray_head")
    store = tmp / "store"
    driver = Driver("ray", head.settings(store), store, _in_folder(tmp / "shared"))
    _publish(driver, tmp)
    yield driver
    _kill_started(driver, tmp / "shared")


@contextlib.contextmanager
def installed_plugin(site: Path, name: str, target: str) -> Iterator[None]:
    """The test package's plug-in installed as an operator's package is (a dist-info whose
    entry point names it), found by discovery in this process; uninstalled after."""
    install_plugins(site, {name: target})
    sys.path.insert(0, str(site))

    def rediscover() -> None:
        importlib.invalidate_caches()
        discover.cache_clear()
        scheduler_settings_model.cache_clear()
        J2CSettings.model_rebuild(force=True)

    rediscover()
    try:
        yield
    finally:
        sys.path.remove(str(site))
        for module in [m for m in sys.modules if m.split(".")[0] == target.split(":")[0]]:
            del sys.modules[module]
        rediscover()


def plugin_driver(request: pytest.FixtureRequest, tmp: Path) -> Iterator[Driver]:
    """``tests/plugins/j2c_test_remote``, installed from the test package."""
    with installed_plugin(tmp / "site", "remote", "j2c_test_remote:RemoteScheduler"):
        store = tmp / "store"
        settings = J2CSettings.model_validate(
            {
                "data_dir": str(tmp / "data"),
                "storage": {"url": store.as_uri(), "shared": True},
                "scheduler": {"remote": {"site": "contract"}},
            }
        )
        env = {"PATH": f"{VENV_BIN}:/usr/bin:/bin", "PYTHONPATH": str(REPO)}
        driver = Driver("remote", settings, store, _in_folder(tmp / "shared"), env=env)
        _publish(driver, tmp)
        yield driver
        for runner in (tmp / "data" / "remote").glob("*/runner.pid"):
            pid = int(runner.read_text())
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        _kill_started(driver, tmp / "shared")


BACKENDS: dict[str, DriverFactory] = {
    "local": local_driver,
    "slurm": slurm_driver,
    "container": container_driver,
    "kubernetes": kubernetes_driver,
    "ray": ray_driver,
    "remote": plugin_driver,
}
MARKS: dict[str, list[pytest.MarkDecorator]] = {
    "slurm": [pytest.mark.slurm],
    "ray": [pytest.mark.ray],
}
