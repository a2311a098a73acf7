"""The container backend on a rootful engine, among tenants: the guardrail refuses settings by
what they mean (any network mode that joins a namespace not the job's own, any capability given
back), not by one spelling; the image probe runs as hardened as a job. On the suite's real
(rootful) podman where an engine is needed.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from j2c_server.schedulers.container.backend import ContainerScheduler
from j2c_server.schedulers.container.engine import EngineInfo, unsafe_settings
from j2c_server.schedulers.container.probe import probe_body
from j2c_server.schedulers.container.settings import ContainerSettings
from tests.support.podman import Podman

ROOTFUL = EngineInfo(podman=True, rootless=False)


@pytest.mark.parametrize(
    ("setting", "field", "words"),
    [
        ({"network": "ns:/proc/1/ns/net"}, "scheduler.container.network", "namespace"),
        ({"network": "NS:/var/run/netns/tenant-b"}, "scheduler.container.network", "namespace"),
        ({"network": "container:j2c-0123456789abcdef0123"}, "scheduler.container.network", "of"),
        ({"network": " Host "}, "scheduler.container.network", "this machine's network"),
        ({"cap_add": ["NET_RAW"]}, "scheduler.container.cap_add", "NET_RAW"),
        ({"cap_add": ["sys_ptrace"]}, "scheduler.container.cap_add", "SYS_PTRACE"),
    ],
)
def test_a_rootful_engine_refuses_what_joins_another_namespace_or_gives_a_capability(
    setting: dict[str, Any], field: str, words: str, tmp_path: Path
) -> None:
    cfg = ContainerSettings(**setting)
    (problem,) = unsafe_settings(cfg, ROOTFUL, lambda key: False, home=tmp_path)
    assert problem.field == field and words in str(problem)
    assert unsafe_settings(cfg, ROOTFUL, lambda key: key == field, home=tmp_path) == []
    assert unsafe_settings(cfg, EngineInfo(podman=True, rootless=True), lambda key: False) == []


@pytest.mark.parametrize("network", ["bridge", "none", "private", "j2c-team-net", None])
def test_a_network_of_the_jobs_own_passes(network: str | None, tmp_path: Path) -> None:
    cfg = ContainerSettings(network=network)
    assert unsafe_settings(cfg, ROOTFUL, lambda key: False, home=tmp_path) == []


@pytest.mark.parametrize(
    ("setting", "field"),
    [
        ({"network": "ns:/proc/1/ns/net"}, "scheduler.container.network"),
        ({"network": "container:some-other-job"}, "scheduler.container.network"),
        ({"cap_add": ["NET_ADMIN"]}, "scheduler.container.cap_add"),
    ],
)
def test_the_real_rootful_engine_gets_no_job_with_them(
    podman: Podman, tmp_path: Path, setting: dict[str, Any], field: str
) -> None:
    settings = podman.settings(tmp_path / "data", **setting)
    problems = asyncio.run(ContainerScheduler.preflight_problems(settings))
    assert [name for name, _ in problems] == [field]


async def _printed(podman: Podman, body: dict[str, Any], name: str) -> str:
    """What a container made from ``body`` prints."""
    transport = httpx.AsyncHTTPTransport(uds=podman.socket)
    async with httpx.AsyncClient(transport=transport, base_url="http://engine") as engine:
        try:
            made = await engine.post("/v1.41/containers/create", params={"name": name}, json=body)
            assert made.status_code == 201, made.text
            await engine.post(f"/v1.41/containers/{name}/start")
            await engine.post(f"/v1.41/containers/{name}/wait", timeout=60)
            logs = await engine.get(f"/v1.41/containers/{name}/logs", params={"stdout": 1})
        finally:
            await engine.delete(f"/v1.41/containers/{name}", params={"force": 1})
    return logs.content.decode(errors="replace")


STATUS = (
    "import re; status = open('/proc/self/status').read(); "
    "print(*re.findall(r'(?m)^(CapBnd|CapEff|NoNewPrivs):\\s*(\\S+)', status))"
)


def test_the_image_probe_runs_as_hardened_as_a_job(podman: Podman, tmp_path: Path) -> None:
    """The probe's own container (its command replaced by one that reads its status): no
    capability even in its bounding set, no privilege to gain."""
    settings = podman.settings(tmp_path / "data")
    cfg = settings.scheduler.section("container", ContainerSettings)
    body = {**probe_body(podman.image, cfg, "test-probe-hardening"), "Cmd": ["-I", "-c", STATUS]}

    printed = asyncio.run(_printed(podman, body, f"j2c-probe-test-{tmp_path.name[-8:]}"))

    assert "('CapBnd', '0000000000000000')" in printed, printed
    assert "('CapEff', '0000000000000000')" in printed
    assert "('NoNewPrivs', '1')" in printed
    assert body["HostConfig"]["PidsLimit"] == cfg.pids_limit
