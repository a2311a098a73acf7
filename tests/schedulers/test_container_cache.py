"""The node layer cache through the container backend, on a real podman: one host folder per job
uid and per user, bind-mounted at ``/j2c/cache``; the second job of a manifest starts warm."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import httpx
import pytest

from j2c_server.schedulers.base import JobSpec
from j2c_server.schedulers.container.backend import render_dry_run
from j2c_server.schedulers.container.engine import Access
from j2c_server.schedulers.container.folders import cache_folder, prepare_cache
from j2c_server.schedulers.container.settings import ContainerSettings
from j2c_server.schedulers.unpack_cache import tenant_name
from j2c_server.wire.api import Event, EventKind, JobRecord, JobStatus
from tests.support.jobs import diary, final_status, follow, log_lines, submit
from tests.support.podman import Podman

WARM = "1 of 1 layers from the cache, 0 built"
COLD = "0 of 1 layers from the cache, 1 built"


@pytest.fixture
def jp_server_config(podman: Podman, jp_server_config: dict[str, Any]) -> dict[str, Any]:
    overrides = {
        "default_image": podman.image,
        "storage": {"shared": True},  # a root server's jobs run as 1000:1000
        "scheduler": {"container": {"socket": podman.socket}},
    }
    return {**jp_server_config, "J2CApp": {"settings_overrides": overrides}}


def _unpack_lines(events: list[Event]) -> list[str]:
    return [line for line, e in zip(diary(events), _logs(events), strict=True) if e.is_j2c_line]


def _logs(events: list[Event]) -> list[Event]:
    return [e for e in events if e.kind == EventKind.log]


async def test_the_second_job_of_a_manifest_starts_warm_and_leaves_no_container(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path, j2c_data_dir: Path, podman: Podman
) -> None:
    """As root the jobs run as 1000:1000 and the cache folder is given to that uid; as any
    other user (scripts/test.sh's rootless podman leg) they run as the server's own uid
    (``UsernsMode: keep-id``) and the folder is the server's."""
    me = os.geteuid()
    job_uid = 1000 if me == 0 else me
    runs, names = [], []
    for lines in (2, 3):  # two requests (the same one twice would attach to the first job)
        record = await submit(jp_fetch, scheduler="container", args=["--lines", str(lines)])
        events = await follow(jp_ws_fetch, record.id)
        answer = await jp_fetch("j2c", "api", "jobs", record.id)
        handle = JobRecord.model_validate_json(answer.body).handle
        assert handle is not None
        names.append(handle.id)
        assert final_status(events) == JobStatus.succeeded, "\n".join(str(e.text) for e in events)
        assert log_lines(events)[1:] == [f"line {i}" for i in range(lines)]
        runs.append(_unpack_lines(events))
    cold, warm = ("\n".join(lines) for lines in runs)
    assert COLD in cold and WARM not in cold, cold
    assert WARM in warm, warm
    # One folder for the job's uid and this user, the job's; the levels above it the server's.
    folder = j2c_data_dir / "unpack-cache" / str(job_uid) / tenant_name()
    st = os.stat(folder)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (job_uid, 0o700)
    for level in (folder.parent, folder.parent.parent):
        st = os.stat(level)
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (me, 0o700)
    assert any((folder / "entries").iterdir())
    # Both containers were removed once their results were in: the engine knows neither.
    left = list((j2c_data_dir / "containers").iterdir())
    assert len(left) == 2 and all((run / "final.json").is_file() for run in left)
    transport = httpx.AsyncHTTPTransport(uds=podman.socket)
    async with httpx.AsyncClient(transport=transport, base_url="http://engine/v1.41") as engine:
        for name in names:
            assert (await engine.get(f"/containers/{name}/json")).status_code == 404, name


def _spec(image: str) -> JobSpec:
    return JobSpec(key="k", job_id="j", name="n", image=image, command=["j2c-unpack", "x"])


def test_each_uid_and_each_user_has_its_own_folder(
    podman: Podman, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    monkeypatch.setenv("JUPYTERHUB_USER", "alice")
    alice = cache_folder(podman.settings(data, user="1000:1000"))
    other_uid = cache_folder(podman.settings(data, user="1001:1001"))
    monkeypatch.setenv("JUPYTERHUB_USER", "bob")
    bob = cache_folder(podman.settings(data, user="1000:1000"))
    root = data.absolute() / "unpack-cache"
    assert alice == root / "1000" / "alice"
    assert other_uid == root / "1001" / "alice"
    assert bob == root / "1000" / "bob"  # both are jovyan's 1000: still not one folder
    # The dry run shows the bind and J2C_UNPACK_CACHE; only the job's own folder is mounted.
    body = render_dry_run(_spec(podman.image), podman.settings(data, user="1000:1000"))["body"]
    assert f"{bob}:/j2c/cache:rw" in body["HostConfig"]["Binds"]
    assert [b for b in body["HostConfig"]["Binds"] if "unpack-cache" in b] == [
        f"{bob}:/j2c/cache:rw"
    ]
    assert "J2C_UNPACK_CACHE=/j2c/cache" in body["Env"]
    off = render_dry_run(_spec(podman.image), podman.settings(data, cache=False))["body"]
    assert not [b for b in off["HostConfig"]["Binds"] if "/j2c/cache" in b]
    assert not [e for e in off["Env"] if e.startswith("J2C_UNPACK_CACHE")]


def test_a_users_name_is_one_safe_path_component() -> None:
    assert tenant_name({"JUPYTERHUB_USER": "../../etc"}) == ".._.._etc"
    assert tenant_name({"JUPYTERHUB_USER": ".."}) == "user-.."
    assert tenant_name({"JUPYTERHUB_USER": "a b/c"}) == "a_b_c"
    assert tenant_name({}) and "/" not in tenant_name({})


def test_a_cache_folder_someone_else_owns_or_can_write_is_not_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give folders to other uids")
    cfg = ContainerSettings(user="1000:1000")
    folder = tmp_path / "cache" / "1000" / "me"
    assert prepare_cache(folder, cfg, Access()) == folder
    os.chown(folder, 1001, 1001)  # another uid's entries at this uid's place
    assert prepare_cache(folder, cfg, Access()) is None
    assert "belongs to uid 1001" in caplog.text
    os.chown(folder, 1000, 1000)
    folder.parent.chmod(0o777)
    assert prepare_cache(folder, cfg, Access()) is None
    assert "writable by group or others" in caplog.text
