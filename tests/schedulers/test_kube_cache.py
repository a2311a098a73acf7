"""The node layer cache in the Kubernetes Job: only this user's folder of the operator's volume
(``subPath``), mounted at /j2c/cache and passed as ``J2C_UNPACK_CACHE``. Against the fake API
server (no real one can run here, ``tests/support/fake_kube.py``); read back through the
official client."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from j2c_server.core.errors import ConfigError
from j2c_server.schedulers.kubernetes.spec import job_name, render_job
from tests.schedulers.test_kube_multinode import official
from tests.schedulers.test_kubernetes import connect, container, make_settings, make_spec
from tests.support.fake_kube import FakeKube

EPHEMERAL = {
    "ephemeral": {
        "volumeClaimTemplate": {
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "local-nvme",
                "resources": {"requests": {"storage": "50Gi"}},
            }
        }
    }
}


def _cache_parts(job: dict[str, Any]) -> tuple[list[Any], list[Any], dict[str, str]]:
    pod = job["spec"]["template"]["spec"]
    main = pod["containers"][0]
    volumes = [v for v in pod.get("volumes", []) if v["name"] == "j2c-cache"]
    mounts = [m for m in main.get("volumeMounts", []) if m["name"] == "j2c-cache"]
    env = {e["name"]: e["value"] for e in main["env"] if e["name"].startswith("J2C_UNPACK_")}
    return volumes, mounts, env


def _folder(job: dict[str, Any]) -> tuple[str, str]:
    """The user's folder of the volume the pod mounts, and where the job's cache is."""
    _, [mount], env = _cache_parts(job)
    return mount["subPath"], env["J2C_UNPACK_CACHE"]


async def test_the_created_job_has_the_cache_volume_mounted_and_passed(
    fake_kube: FakeKube, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUPYTERHUB_USER", "alice")
    async with connect(fake_kube, tmp_path, namespace="ml", cache_volume=EPHEMERAL) as kube:
        await kube.submit(make_spec())
    created = fake_kube.jobs[("ml", job_name("request-key-1"))]
    back = official(created, "V1Job")
    volumes, mounts, env = _cache_parts(back)
    assert volumes == [{"name": "j2c-cache", **EPHEMERAL}]
    # Only alice's folder of the volume is in the pod: another user's pods (same uid) never
    # see her entries.
    assert mounts == [{"name": "j2c-cache", "mountPath": "/j2c/cache", "subPath": "alice"}]
    assert env == {"J2C_UNPACK_CACHE": "/j2c/cache"}
    # The memory-backed /dev/shm is still there beside it.
    assert [m["mountPath"] for m in container(back)["volumeMounts"]] == ["/dev/shm", "/j2c/cache"]


def test_users_who_share_a_uid_get_their_own_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = make_settings(cache_volume={"csi": {"driver": "local.csi.example"}}, cache_max="50G")
    folders = []
    for user in ("alice", "bob"):
        monkeypatch.setenv("JUPYTERHUB_USER", user)
        job = render_job(make_spec(), settings)
        folders.append(_folder(job))
        assert _cache_parts(job)[2]["J2C_UNPACK_CACHE_MAX"] == "50G"
    assert folders == [("alice", "/j2c/cache"), ("bob", "/j2c/cache")]


def test_a_request_cannot_point_the_cache_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUPYTERHUB_USER", "alice")
    spec = make_spec(env={"J2C_UNPACK_CACHE": "/j2c/cache/bob"})
    job = render_job(spec, make_settings(cache_volume={"emptyDir": {}}))
    names = [e["name"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]]
    assert names.count("J2C_UNPACK_CACHE") == 1
    assert _folder(job) == ("alice", "/j2c/cache")


def test_no_cache_volume_no_cache() -> None:
    assert _cache_parts(render_job(make_spec(), make_settings())) == ([], [], {})


def test_host_path_only_when_the_operator_opts_in() -> None:
    host_path = {"hostPath": {"path": "/var/cache/j2c", "type": "DirectoryOrCreate"}}
    with pytest.raises(ConfigError, match="Pod Security Standards") as raised:
        render_job(make_spec(), make_settings(cache_volume=host_path))
    assert raised.value.field == "scheduler.kubernetes.cache_volume"
    job = render_job(make_spec(), make_settings(cache_volume=host_path, cache_allow_host_path=True))
    assert _cache_parts(official(job, "V1Job"))[0] == [{"name": "j2c-cache", **host_path}]


@pytest.mark.parametrize(
    "source", [{}, {"emptyDir": {}, "csi": {"driver": "x"}}, {"emptyDir": "yes"}]
)
def test_the_cache_volume_is_one_volume_source(source: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="one volume source"):
        make_settings(cache_volume=source)
