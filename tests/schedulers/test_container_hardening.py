"""The container backend on a shared machine (issue #35, High 4 and Medium 5-6), against a real
podman: what a rootful engine refuses, the create request's hardening, and the job's folders."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from j2c_server.core.errors import ConfigError
from j2c_server.schedulers.base import JobSpec
from j2c_server.schedulers.container.api import EngineClient
from j2c_server.schedulers.container.backend import ContainerScheduler, render_dry_run
from j2c_server.schedulers.container.engine import (
    Access,
    EngineInfo,
    job_access,
    read_engine,
    unsafe_settings,
)
from j2c_server.schedulers.container.folders import prepare
from j2c_server.schedulers.container.settings import ContainerSettings
from j2c_server.schedulers.container.spec import job_folder, render_create
from j2c_server.wire.api import JobStatus
from tests.support.podman import Podman

ROOTFUL = EngineInfo(podman=True, rootless=False)


def _spec(podman: Podman, script: str) -> JobSpec:
    job_id = f"t{time.monotonic_ns()}"
    return JobSpec(
        key=f"key-{job_id}",
        job_id=job_id,
        name="t",
        image=podman.image,
        command=["sh", "-c", script],
    )


async def _run(scheduler: ContainerScheduler, spec: JobSpec) -> tuple[JobStatus, list[str]]:
    handle = await scheduler.submit(spec)
    lines = [line.text async for line in scheduler.follow_logs(handle)]
    state = await scheduler.status(handle)
    await scheduler.results(handle)
    return state.status, lines


# ---------------------------------------------------------------- High 4: a rootful engine


def test_the_engine_says_it_is_rootful_podman(podman: Podman) -> None:
    async def go() -> EngineInfo:
        api = EngineClient(podman.socket, "v1.41")
        try:
            return await read_engine(api)
        finally:
            await api.aclose()

    assert asyncio.run(go()) == ROOTFUL  # the test service runs as root


@pytest.mark.parametrize(
    ("setting", "field"),
    [
        ({"user": "0:0"}, "scheduler.container.user"),
        ({"user": "0"}, "scheduler.container.user"),
        ({"network": "host"}, "scheduler.container.network"),
        ({"credentials_dir": "/"}, "scheduler.container.credentials_dir"),
        ({"credentials_dir": "/etc"}, "scheduler.container.credentials_dir"),
    ],
)
def test_a_rootful_engine_refuses_what_only_an_operator_may_grant(
    podman: Podman, tmp_path: Path, setting: dict[str, Any], field: str
) -> None:
    scheduler = ContainerScheduler(podman.settings(tmp_path / "data", **setting))

    async def go() -> None:
        try:
            await scheduler.submit(_spec(podman, "echo should-not-run"))
        finally:
            await scheduler.close()

    with pytest.raises(ConfigError) as raised:
        asyncio.run(go())
    assert raised.value.field == field
    assert "runs as root" in str(raised.value) and "rootless podman" in (raised.value.hint or "")
    assert not (tmp_path / "data" / "containers").exists()  # refused before any folder


def test_a_rootless_engine_or_a_locked_setting_allows_them(tmp_path: Path) -> None:
    cfg = ContainerSettings(user="0:0", network="host", credentials_dir="/etc")
    assert len(unsafe_settings(cfg, ROOTFUL, lambda key: False, home=tmp_path)) == 3
    assert unsafe_settings(cfg, EngineInfo(podman=True, rootless=True), lambda k: False) == []
    assert unsafe_settings(cfg, ROOTFUL, lambda key: True, home=tmp_path) == []
    inside = ContainerSettings(credentials_dir=str(tmp_path / ".aws"))
    assert unsafe_settings(inside, ROOTFUL, lambda key: False, home=tmp_path) == []


# ---------------------------------------------------------------- Medium 5: hardening


def test_the_create_request_drops_every_capability_and_gains_no_privileges(
    podman: Podman, tmp_path: Path
) -> None:
    spec = _spec(podman, "true")
    host = render_dry_run(spec, podman.settings(tmp_path / "data"))["body"]["HostConfig"]
    assert host["CapDrop"] == ["ALL"]
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert host["PidsLimit"] == 4096
    assert "CapAdd" not in host and "Privileged" not in host
    named = podman.settings(tmp_path / "data", cap_add=["sys_ptrace", "CAP_NET_BIND_SERVICE"])
    host = render_dry_run(spec, named)["body"]["HostConfig"]
    assert host["CapAdd"] == ["SYS_PTRACE", "NET_BIND_SERVICE"] and host["CapDrop"] == ["ALL"]
    unlimited = podman.settings(tmp_path / "data", pids_limit=0)
    assert "PidsLimit" not in render_dry_run(spec, unlimited)["body"]["HostConfig"]


@pytest.mark.parametrize("names", [["ALL"], ["sys admin"]])
def test_cap_add_names_capabilities_one_by_one(names: list[str]) -> None:
    with pytest.raises(ValidationError, match="one by one"):
        ContainerSettings(cap_add=names)


def test_a_setuid_root_binary_in_the_job_gets_no_capabilities(
    podman: Podman, tmp_path: Path
) -> None:
    settings = podman.settings(tmp_path / "data")
    spec = _spec(
        podman, 'exec "$HOME/sgrep" -E "^(CapEff|CapPrm|CapBnd|NoNewPrivs)" /proc/self/status'
    )
    home = job_folder(settings, spec.key) / "home"
    home.mkdir(parents=True)
    # As an image would ship it: a setuid-root copy of the image's own grep (made by root).
    subprocess.run(
        [
            "podman", "run", "--rm", "--user", "0:0", "-v", f"{home}:/h:rw", podman.image,
            "sh", "-c", "cp /bin/grep /h/sgrep && chmod 4755 /h/sgrep",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    assert os.stat(home / "sgrep").st_mode & stat.S_ISUID and os.stat(home / "sgrep").st_uid == 0

    async def go() -> tuple[JobStatus, list[str]]:
        scheduler = ContainerScheduler(settings)
        try:
            return await _run(scheduler, spec)
        finally:
            await scheduler.close()

    status, lines = asyncio.run(go())
    assert status == JobStatus.succeeded, lines
    found = dict(line.replace("\t", "").split(":") for line in lines)
    assert found == {
        "CapEff": "0000000000000000",
        "CapPrm": "0000000000000000",
        "CapBnd": "0000000000000000",
        "NoNewPrivs": "1",
    }


FORK_60 = """
import subprocess
import tempfile
started = []
try:
    for _ in range(60):
        started.append(subprocess.Popen(["sleep", "30"]))
except OSError as exc:
    print("refused after", len(started), exc.strerror, flush=True)
for process in started:
    process.kill()
"""


def test_a_job_cannot_start_more_processes_than_the_pids_limit(
    podman: Podman, tmp_path: Path
) -> None:
    spec = _spec(podman, "").model_copy(update={"command": ["python3", "-c", FORK_60]})

    async def go() -> list[str]:
        scheduler = ContainerScheduler(podman.settings(tmp_path / "data", pids_limit=20))
        try:
            return (await _run(scheduler, spec))[1]
        finally:
            await scheduler.close()

    (line,) = [text for text in asyncio.run(go()) if text.startswith("refused after")]
    assert int(line.split()[2]) < 20


# ---------------------------------------------------------------- Medium 6: no 0777 folder


def _world_writable(root: Path) -> list[str]:
    found = []
    for path in [root, *root.rglob("*")]:
        st = os.lstat(path)
        if stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_IWOTH:
            found.append(f"{path} {oct(stat.S_IMODE(st.st_mode))}")
    return found


def test_no_folder_j2c_makes_for_a_container_job_is_world_writable(
    podman: Podman, tmp_path: Path
) -> None:
    """HOME, outputs, the store's upload folder and the cache are the job uid's, 0700, under
    0700 folders of the server: as root the job's uid is 1000; as any other user (the rootless
    podman leg of scripts/test.sh) it is the server's own (``UsernsMode: keep-id``)."""
    me = os.geteuid()
    job_uid = 1000 if me == 0 else me
    data = tmp_path / "data"
    settings = podman.settings(data)
    upload = data / "store" / "jobs" / "j1" / "outputs"
    spec = _spec(podman, 'touch "$HOME/x" "$J2C_OUTPUT_DIR/y" /j2c/store/jobs/j1/outputs/z')
    # As j2c-unpack's own option (sh takes it as $0 and $1): the store folder to upload to.
    spec = spec.model_copy(
        update={"command": ["sh", "-c", spec.command[2], "--output-uri", upload.as_uri()]}
    )

    async def go() -> tuple[JobStatus, list[str]]:
        scheduler = ContainerScheduler(settings)
        try:
            return await _run(scheduler, spec)
        finally:
            await scheduler.close()

    folder = job_folder(settings, spec.key)
    asyncio.run(go())
    assert _world_writable(data) == []
    modes = {
        path: (os.stat(path).st_uid, stat.S_IMODE(os.stat(path).st_mode))
        for path in (folder, folder / "home", folder / "outputs", upload)
    }
    assert modes == {
        folder: (me, 0o700),
        folder / "home": (job_uid, 0o700),
        folder / "outputs": (job_uid, 0o700),
        upload: (job_uid, 0o700),
    }


def _prepare_as(uid: int, root: Path, engine: EngineInfo) -> dict[str, Any]:
    """``prepare`` in a child whose effective uid is ``uid`` (a server not running as root)."""
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.close(read)
            os.setegid(uid)
            os.seteuid(uid)
            access = job_access(1000, engine)
            prepare(
                [root / "home"], [root / "outputs"], ContainerSettings(user="1000:1000"), access
            )
            modes = {p.name: oct(p.stat().st_mode & 0o777) for p in root.iterdir()}
            os.write(
                write, json.dumps({"chown_binds": access.chown_binds, "modes": modes}).encode()
            )
            code = 0
        except BaseException as exc:  # said to the parent
            os.write(write, repr(exc).encode())
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        text = pipe.read()
    assert os.waitpid(child, 0)[1] == 0, text
    result: dict[str, Any] = json.loads(text)
    return result


def test_a_server_not_root_gives_folders_to_another_uid_through_podman_not_0777(
    tmp_path: Path,
) -> None:
    """A server running as uid 65534 with jobs as 1000 (the case that made folders 0777)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to act as another uid")
    top = Path(tempfile.mkdtemp(prefix="j2c-other-uid-"))  # /tmp: reachable by that uid
    top.chmod(0o755)
    try:
        for rootless in (True, False):
            root = top / f"job-{rootless}"
            root.mkdir()
            os.chown(root, 65534, 65534)
            result = _prepare_as(65534, root, EngineInfo(podman=True, rootless=rootless))
            assert result == {
                "chown_binds": True,
                "modes": {"home": "0o700", "outputs": "0o755"},
            }
    finally:
        shutil.rmtree(top)


def test_podman_gives_a_bound_folder_to_the_jobs_uid(podman: Podman, tmp_path: Path) -> None:
    """``U`` on a bind: the job's uid owns a folder the server made 0700 for itself."""
    settings = podman.settings(tmp_path / "data")
    spec = _spec(podman, 'id -u; stat -c %u "$HOME"; echo hi > "$HOME/f" && echo wrote')
    folder = job_folder(settings, spec.key)
    for path in (folder, folder / "home", folder / "outputs"):
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o700)
    request = render_create(spec, settings, access=Access(chown_binds=True))
    assert all(b.endswith(":rw,U") for b in request["body"]["HostConfig"]["Binds"][:2])

    async def go() -> list[str]:
        transport = httpx.AsyncHTTPTransport(uds=podman.socket)
        async with httpx.AsyncClient(transport=transport, base_url="http://e/v1.41") as client:
            made = await client.post(
                "/containers/create", params={"name": request["name"]}, json=request["body"]
            )
            assert made.status_code == 201, made.text
            await client.post(f"/containers/{request['name']}/start")
            await client.post(f"/containers/{request['name']}/wait", timeout=60)
            logs = await client.get(
                f"/containers/{request['name']}/logs", params={"stdout": 1, "stderr": 1}
            )
            await client.delete(f"/containers/{request['name']}", params={"force": 1})
            return [line[8:] if line[:1] in "\x01\x02" else line for line in logs.text.split("\n")]

    lines = [line.strip("\x00\x01\x02") for line in asyncio.run(go()) if line.strip()]
    assert [line[-4:] for line in lines][-3:] == ["1000", "1000", "rote"], lines


def test_job_access_follows_who_the_server_and_the_engine_are() -> None:
    me = os.geteuid()
    assert job_access(1000, None) == Access()
    if me == 0:
        assert job_access(1000, ROOTFUL) == Access()  # chown
    else:
        assert job_access(me, EngineInfo(podman=True, rootless=True)) == Access(userns="keep-id")
        assert job_access(me + 1, ROOTFUL) == Access(chown_binds=True)


def test_the_preflight_says_what_a_rootful_engine_refuses(podman: Podman, tmp_path: Path) -> None:
    from j2c_server.jobs.service import JobService
    from j2c_server.wire.api import JobRequest

    project = tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text("print('hi')\n")
    settings = podman.settings(tmp_path / "data", user="0:0", network="host")
    request = JobRequest(
        code_path=str(project),
        call_path=str(project / "train.py"),
        scheduler="container",
        image=podman.image,
    )

    async def go() -> list[Any]:
        service = JobService(settings)
        service.start()
        try:
            return (await service.preflight(request)).warnings
        finally:
            await service.stop()

    refused = {w.path: w.message for w in asyncio.run(go()) if w.code == "refused_setting"}
    assert set(refused) == {"scheduler.container.user", "scheduler.container.network"}
    assert all("runs as root" in m and "submit refuses it" in m for m in refused.values())
    # A default user on the same engine: nothing to say.
    fine = ContainerScheduler.preflight_problems(podman.settings(tmp_path / "data"))
    assert asyncio.run(fine) == []
