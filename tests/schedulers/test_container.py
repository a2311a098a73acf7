"""The container scheduler against a real podman (Docker Engine API on a unix socket), running
the platform image that ``scripts/platform-image.sh`` builds."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from j2c_server.core.errors import Conflict, InvalidInput
from j2c_server.schedulers import make_scheduler
from j2c_server.schedulers.base import JobSpec, LogLine
from j2c_server.schedulers.container import lifecycle as container_lifecycle
from j2c_server.schedulers.container.api import LogCursor, LogReader
from j2c_server.schedulers.container.backend import ContainerScheduler, render_dry_run
from j2c_server.schedulers.container.lifecycle import PROBE_PREFIX, runs_label
from j2c_server.schedulers.container.probe import probe_body
from j2c_server.schedulers.container.settings import ContainerSettings
from j2c_server.schedulers.container.spec import LABEL_MANAGED_BY, runs_root
from j2c_server.wire.api import JobHandle, JobStatus, Resources
from tests.support.podman import Podman

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def spec_for(podman: Podman, script: str, *, key: str | None = None, **extra: Any) -> JobSpec:
    job_id = f"t{time.monotonic_ns()}"
    return JobSpec(
        key=key or f"key-{job_id}",
        job_id=job_id,
        name="test",
        image=podman.image,
        command=["sh", "-c", script],
        **extra,
    )


async def _engine(podman: Podman, method: str, path: str, **kwargs: Any) -> httpx.Response:
    transport = httpx.AsyncHTTPTransport(uds=podman.socket)
    async with httpx.AsyncClient(transport=transport, base_url="http://engine") as client:
        return await client.request(method, "/v1.41" + path, **kwargs)


async def _lines(
    scheduler: ContainerScheduler, handle: JobHandle, cursor: str | None = None
) -> list[LogLine]:
    return [line async for line in scheduler.follow_logs(handle, cursor)]


async def _wait_status(
    scheduler: ContainerScheduler, handle: JobHandle, wanted: set[JobStatus], timeout: float = 60
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        state = await scheduler.status(handle)
        if state.status in wanted or time.monotonic() > deadline:
            return state
        await asyncio.sleep(0.2)


@pytest.fixture(autouse=True)
def _no_container_left(podman: Podman) -> Iterator[None]:
    """These tests drive the backend below the results stage, which is what removes a job's
    container: what a test made goes when it ends, so the engine does not fill up."""

    async def managed() -> set[str]:
        answer = await _engine(
            podman,
            "GET",
            "/containers/json",
            params={"all": "1", "filters": json.dumps({"label": [LABEL_MANAGED_BY]})},
        )
        return {container["Id"] for container in answer.json()}

    async def remove(ids: set[str]) -> None:
        for container in ids:
            await _engine(podman, "DELETE", f"/containers/{container}", params={"force": "1"})

    before = run(managed())
    yield
    run(remove(run(managed()) - before))


@pytest.fixture
def scheduler(podman: Podman, tmp_path: Path) -> ContainerScheduler:
    return ContainerScheduler(podman.settings(tmp_path / "data", cancel_grace_s=2))


def test_every_line_arrives_once_and_the_exit_code_is_mirrored(
    podman: Podman, scheduler: ContainerScheduler
) -> None:
    script = "for i in $(seq 1 200); do echo line $i; done; echo oops >&2; exit 3"

    async def go() -> None:
        handle = await scheduler.submit(spec_for(podman, script))
        lines = await _lines(scheduler, handle)
        assert [line.text for line in lines if line.stream == "stdout"] == [
            f"line {i}" for i in range(1, 201)
        ]
        assert [(line.text, line.stream) for line in lines if line.stream == "stderr"] == [
            ("oops", "stderr")
        ]
        state = await scheduler.status(handle)
        assert state.status == JobStatus.failed and state.exit_code == 3
        assert (await scheduler.results(handle)).exit_code == 3
        await scheduler.close()

    run(go())


def test_runs_as_a_non_root_uid_with_a_writable_home_and_outputs(
    podman: Podman, scheduler: ContainerScheduler
) -> None:
    script = (
        'id -u; id -g; echo "$HOME"; echo hi > "$HOME/.cfg" && echo home-ok; '
        'echo out > "$J2C_OUTPUT_DIR/result.txt"'
    )

    async def go() -> None:
        handle = await scheduler.submit(spec_for(podman, script))
        texts = [line.text for line in await _lines(scheduler, handle)]
        assert texts == ["1000", "1000", "/j2c/home", "home-ok"]
        assert (await scheduler.status(handle)).status == JobStatus.succeeded
        results = await scheduler.results(handle)
        assert [a.name for a in results.artifacts] == ["result.txt"]
        await scheduler.close()

    run(go())


def test_a_retried_submit_adopts_the_container_and_another_request_is_refused(
    podman: Podman, scheduler: ContainerScheduler
) -> None:
    spec = spec_for(podman, "echo once; sleep 2")

    async def go() -> None:
        first = await scheduler.submit(spec)
        second = await scheduler.submit(spec)
        assert second.id == first.id and second.data["id"] == first.data["id"]
        listed = await _engine(
            podman,
            "GET",
            "/containers/json",
            params={"all": "1", "filters": json.dumps({"label": [f"j2c.io/key={spec.key}"]})},
        )
        assert len(listed.json()) == 1
        assert [line.text for line in await _lines(scheduler, first)] == ["once"]
        # A container of that name made for another key is not adopted.
        other = await _engine(
            podman,
            "POST",
            "/containers/create",
            params={"name": "j2c-" + "0" * 20},
            json={"Image": podman.image, "Cmd": ["true"], "Labels": {"j2c.io/key": "someone"}},
        )
        assert other.status_code == 201
        try:
            clash = spec.model_copy(update={"key": "x"})
            from j2c_server.schedulers.container import spec as container_spec

            original = container_spec.container_name
            container_spec.container_name = lambda key, rank=0: "j2c-" + "0" * 20  # type: ignore[assignment]
            try:
                with pytest.raises(Conflict):
                    await scheduler.submit(clash)
            finally:
                container_spec.container_name = original
        finally:
            await _engine(podman, "DELETE", "/containers/j2c-" + "0" * 20, params={"force": "1"})
        await scheduler.close()

    run(go())


def test_a_restarted_scheduler_reattaches_and_resumes_from_the_cursor(
    podman: Podman, tmp_path: Path
) -> None:
    settings = podman.settings(tmp_path / "data")
    # Lines over several seconds, several per second: the cursor must count within a second.
    script = "for i in $(seq 1 30); do echo line $i; sleep 0.1; done"

    async def go() -> None:
        first = ContainerScheduler(settings)
        handle = await first.submit(spec_for(podman, script))
        seen: list[LogLine] = []
        async for line in first.follow_logs(handle):
            seen.append(line)
            if len(seen) == 12:
                break
        await first.close()
        second = make_scheduler("container", settings)
        rest = await _lines(
            second, JobHandle.model_validate_json(handle.model_dump_json()), seen[-1].cursor
        )  # type: ignore[arg-type]
        assert [line.text for line in seen + rest] == [f"line {i}" for i in range(1, 31)]
        # Reading again from the middle gives the same tail.
        again = await _lines(second, handle, seen[5].cursor)  # type: ignore[arg-type]
        assert [line.text for line in again] == [f"line {i}" for i in range(7, 31)]
        assert (await second.status(handle)).status == JobStatus.succeeded
        await second.close()

    run(go())


def test_cancel_sends_sigterm_then_sigkill_after_the_grace(
    podman: Podman, scheduler: ContainerScheduler
) -> None:
    polite = "trap 'echo got TERM; exit 143' TERM; echo started; while true; do sleep 0.1; done"
    stubborn = "trap 'echo ignoring TERM' TERM; echo started; while true; do sleep 0.1; done"

    async def go() -> None:
        for script, wanted in ((polite, "got TERM"), (stubborn, "ignoring TERM")):
            handle = await scheduler.submit(spec_for(podman, script))
            async for line in scheduler.follow_logs(handle):
                assert line.text == "started"
                break
            began = time.monotonic()
            await scheduler.cancel(handle)
            took = time.monotonic() - began
            state = await _wait_status(scheduler, handle, {JobStatus.cancelled})
            assert state.status == JobStatus.cancelled
            texts = [line.text for line in await _lines(scheduler, handle)]
            assert wanted in texts
            if script is stubborn:
                assert 1.5 < took < 15  # killed after the 2 s grace
            else:
                assert took < 2
        await scheduler.close()

    run(go())


def test_a_container_removed_behind_its_back_is_lost_with_a_reason(
    podman: Podman, scheduler: ContainerScheduler
) -> None:
    async def go() -> None:
        handle = await scheduler.submit(spec_for(podman, "sleep 60"))
        await _wait_status(scheduler, handle, {JobStatus.running})
        removed = await _engine(podman, "DELETE", f"/containers/{handle.id}", params={"force": "1"})
        assert removed.status_code in (200, 204)
        state = await scheduler.status(handle)
        assert state.status == JobStatus.lost
        assert handle.id in (state.message or "") and "no longer exists" in (state.message or "")
        assert await _lines(scheduler, handle) == []
        await scheduler.close()

    run(go())


def test_an_image_the_engine_lacks_is_an_error_naming_image(
    podman: Podman, scheduler: ContainerScheduler
) -> None:
    spec = spec_for(podman, "true").model_copy(update={"image": "localhost/no-such-image:1"})
    with pytest.raises(InvalidInput) as info:
        run(scheduler.submit(spec))
    assert info.value.field == "image"


def test_the_dry_run_shows_limits_gpus_user_and_mounts(podman: Podman, tmp_path: Path) -> None:
    settings = podman.settings(tmp_path / "data", user="1234:1234")
    store = tmp_path / "data" / "store"
    spec = JobSpec(
        key="k",
        job_id="j",
        name="n",
        image="img:1",
        command=[
            "j2c-unpack",
            f"{store.as_uri()}/m.json",
            "--output-uri",
            f"{store.as_uri()}/jobs/j/outputs",
            "--",
            f"{store.as_uri()}/m.json",
        ],
        env={"J2C_STORAGE__REGION": "r"},
        resources=Resources(cpus=1.5, memory="2Gi", gpus=2),
    )
    request = render_dry_run(spec, settings)
    body = request["body"]
    host = body["HostConfig"]
    assert request["path"].endswith(
        "/containers/create?name=" + "j2c-" + request["path"].split("j2c-")[1]
    )
    assert body["Entrypoint"] == ["j2c-unpack"] and body["User"] == "1234:1234"
    assert host["NanoCpus"] == 1_500_000_000 and host["Memory"] == 2 * 1024**3
    assert [d["PathOnHost"] for d in host["Devices"]] == ["nvidia.com/gpu=0", "nvidia.com/gpu=1"]
    # Only the job's own store files, never the store's folder (other jobs' files are in it),
    # each at a neutral path in the container: the host's may be under a folder (/root) the
    # job's uid cannot traverse there.
    assert f"{store}/m.json:/j2c/store/m.json:ro" in host["Binds"]
    assert not [bind for bind in host["Binds"] if bind.startswith(f"{store}:")]
    assert f"{store}/jobs/j/outputs:/j2c/store/jobs/j/outputs:rw" in host["Binds"]
    # j2c-unpack is handed those paths; the entry point's own arguments are left alone.
    assert body["Cmd"] == [
        "file:///j2c/store/m.json",
        "--output-uri",
        "file:///j2c/store/jobs/j/outputs",
        "--",
        f"{store.as_uri()}/m.json",
    ]
    assert "J2C_STORAGE__REGION=r" in body["Env"] and "HOME=/j2c/home" in body["Env"]
    requests = podman.settings(tmp_path / "data", gpu_mode="device_requests")
    assert render_dry_run(spec, requests)["body"]["HostConfig"]["DeviceRequests"][0][
        "DeviceIDs"
    ] == ["0", "1"]


def test_the_log_reader_skips_what_the_cursor_covers_and_joins_split_entries() -> None:
    def frame(stream: int, text: str) -> bytes:
        data = text.encode()
        return bytes([stream, 0, 0, 0]) + len(data).to_bytes(4, "big") + data

    chunk = (
        frame(1, "2026-01-01T00:00:00Z a\n")
        + frame(1, "2026-01-01T00:00:00Z b\n")
        + frame(2, "2026-01-01T00:00:01.5+00:00 c\n")
        + frame(1, "2026-01-01T00:00:01.5Z long ")
        + frame(1, "2026-01-01T00:00:02Z line\n")
    )
    everything = LogReader(LogCursor()).feed(chunk)
    assert [(line.text, line.stream) for line in everything] == [
        ("a", "stdout"),
        ("b", "stdout"),
        ("c", "stderr"),
        ("long line", "stdout"),
    ]
    after_a = LogReader(LogCursor.parse(everything[0].cursor))
    # Fed byte by byte: frames split anywhere still parse.
    resumed = [line for byte in chunk for line in after_a.feed(bytes([byte]))]
    assert [line.text for line in resumed] == ["b", "c", "long line"]
    with pytest.raises(InvalidInput):
        LogCursor.parse("12")


def test_jobs_run_as_the_servers_own_uid_by_default_but_never_as_root(
    podman: Podman, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = JobSpec(key="k", job_id="j", name="n", image="img:1", command=["true"])
    monkeypatch.setattr("os.getuid", lambda: 1234)
    monkeypatch.setattr("os.getgid", lambda: 567)
    body = render_dry_run(spec, podman.settings(tmp_path / "data"))["body"]
    # The server's uid: the job reads its private store, the server reads the job's outputs.
    assert body["User"] == "1234:567"
    explicit = podman.settings(tmp_path / "data", user="2000:2000")
    assert render_dry_run(spec, explicit)["body"]["User"] == "2000:2000"
    monkeypatch.setattr("os.getuid", lambda: 0)
    monkeypatch.setattr("os.getgid", lambda: 0)
    assert render_dry_run(spec, podman.settings(tmp_path / "data"))["body"]["User"] == "1000:1000"


def test_the_job_mounts_its_layer_and_big_file_blobs_not_those_with_their_own_url(
    podman: Podman, tmp_path: Path
) -> None:
    from j2c_server.schedulers.container.spec import store_files

    settings = podman.settings(tmp_path / "data")
    store = tmp_path / "data" / "store"
    hexes = [f"{n}" * 64 for n in "abcd"]
    manifest = store / "manifests" / "sha256" / f"{'e' * 64}.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(
        json.dumps(
            {
                "layers": [
                    {"digest": f"sha256:{hexes[0]}"},
                    {"digest": f"sha256:{hexes[1]}", "url": "https://elsewhere/x"},
                ],
                "files": [{"digest": f"sha256:{hexes[2]}"}, {"digest": "not-a-digest"}],
            }
        )
    )
    spec = JobSpec(
        key="k", job_id="j", name="n", image="i", command=["j2c-unpack", manifest.as_uri()]
    )
    blobs = store / "blobs" / "sha256"
    assert store_files(spec, settings) == [
        manifest,
        blobs / f"{hexes[0]}.tar.zst",
        blobs / f"{hexes[2]}.file",
    ]
    body = render_dry_run(spec, settings)["body"]
    assert (
        f"{blobs}/{hexes[2]}.file:/j2c/store/blobs/sha256/{hexes[2]}.file:ro"
        in (body["HostConfig"]["Binds"])
    )


async def _engine_has(podman: Podman, name: str) -> bool:
    return (await _engine(podman, "GET", f"/containers/{name}/json")).status_code == 200


def test_a_collected_container_is_removed_and_its_state_still_reads(
    podman: Podman, tmp_path: Path
) -> None:
    settings = podman.settings(tmp_path / "data")

    async def go() -> None:
        scheduler = ContainerScheduler(settings)
        spec = spec_for(podman, 'echo hi; echo r > "$J2C_OUTPUT_DIR/r"')
        handle = await scheduler.submit(spec)
        assert [line.text for line in await _lines(scheduler, handle)] == ["hi"]
        assert (await scheduler.status(handle)).status == JobStatus.succeeded
        assert await _engine_has(podman, handle.id)  # kept until its results are read
        results = await scheduler.results(handle)
        assert results.exit_code == 0 and [a.name for a in results.artifacts] == ["r"]
        assert not await _engine_has(podman, handle.id)
        # The recorded terminal state wins over "no such container" (never lost), here and
        # after a restart; results read again give the same; a retried submit starts nothing.
        again = ContainerScheduler(settings)
        for reader in (scheduler, again):
            state = await reader.status(handle)
            assert (state.status, state.exit_code) == (JobStatus.succeeded, 0)
            assert (await reader.results(handle)).exit_code == 0
        retried = await again.submit(spec)
        assert retried.id == handle.id and not await _engine_has(podman, handle.id)
        await scheduler.close()
        await again.close()

    run(go())


def test_keep_finished_keeps_it_and_a_restart_sweeps_only_its_own_collected_containers(
    podman: Podman, tmp_path: Path
) -> None:
    kept = podman.settings(tmp_path / "data", keep_finished=True)
    elsewhere = podman.settings(tmp_path / "other", keep_finished=True)

    async def finished(settings: Any, collect: bool) -> JobHandle:
        scheduler = ContainerScheduler(settings)
        handle = await scheduler.submit(spec_for(podman, "true"))
        await _lines(scheduler, handle)
        await _wait_status(scheduler, handle, {JobStatus.succeeded})
        if collect:
            await scheduler.results(handle)
        await scheduler.close()
        return handle

    async def go() -> None:
        collected = await finished(kept, collect=True)
        uncollected = await finished(kept, collect=False)
        foreign = await finished(elsewhere, collect=True)
        for handle in (collected, uncollected, foreign):
            assert await _engine_has(podman, handle.id)
        restarted = ContainerScheduler(podman.settings(tmp_path / "data"))
        assert (await restarted.status(uncollected)).status == JobStatus.succeeded
        # Its own collected container went; the one whose results were never read stays (its
        # watcher collects it), and another server's container is not touched.
        assert not await _engine_has(podman, collected.id)
        assert await _engine_has(podman, uncollected.id)
        assert await _engine_has(podman, foreign.id)
        assert (await restarted.status(collected)).status == JobStatus.succeeded
        await restarted.results(uncollected)
        assert not await _engine_has(podman, uncollected.id)
        await restarted.close()
        await _engine(podman, "DELETE", f"/containers/{foreign.id}", params={"force": "1"})

    run(go())


def test_a_restart_removes_the_image_probes_its_killed_server_left_and_no_other(
    podman: Podman, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What a server killed mid-probe leaves: an exited probe container of its image. The probe's
    # runner would have removed it in its `finally`; only the next start of a scheduler can.
    own, other = podman.settings(tmp_path / "data"), podman.settings(tmp_path / "other")
    cfg = own.scheduler.section("container", ContainerSettings)

    async def left_probe(settings: Any) -> str:
        name = f"{PROBE_PREFIX}{time.monotonic_ns()}"
        body = probe_body(podman.image, cfg, runs_label(runs_root(settings)))
        await _engine(podman, "POST", "/containers/create", params={"name": name}, json=body)
        await _engine(podman, "POST", f"/containers/{name}/start")
        await _engine(podman, "POST", f"/containers/{name}/wait")
        return name

    async def go() -> None:
        made: list[str] = []
        try:
            made += [mine := await left_probe(own), foreign := await left_probe(other)]
            monkeypatch.setattr(container_lifecycle, "PROBE_ORPHAN_S", 0.0)
            scheduler = ContainerScheduler(own)
            await scheduler.status(JobHandle(scheduler="container", id="j2c-nosuchjob"))
            await scheduler.close()
            assert not await _engine_has(podman, mine)
            assert await _engine_has(podman, foreign)  # another server's: not touched
            monkeypatch.undo()
            made.append(young := await left_probe(own))  # maybe a live probe of this server
            restarted = ContainerScheduler(own)
            await restarted.status(JobHandle(scheduler="container", id="j2c-nosuchjob"))
            await restarted.close()
            assert await _engine_has(podman, young)
        finally:  # the engine is shared with every other test
            for name in made:
                await _engine(podman, "DELETE", f"/containers/{name}", params={"force": "1"})

    run(go())


def test_a_job_past_its_time_limit_is_stopped_and_fails_as_timed_out(
    podman: Podman, tmp_path: Path
) -> None:
    # 0.05 min = 3 s; the job ignores SIGTERM, so the engine kills it after the 1 s grace.
    settings = podman.settings(tmp_path / "data", time_limit_minutes=0.05, cancel_grace_s=1)
    script = "trap 'echo TERM' TERM; echo started; while true; do sleep 0.1; done"

    async def go() -> None:
        scheduler = ContainerScheduler(settings)
        began = time.monotonic()
        handle = await scheduler.submit(spec_for(podman, script))
        state = await _wait_status(scheduler, handle, {JobStatus.failed}, timeout=30)
        took = time.monotonic() - began
        assert state.status == JobStatus.failed, state
        assert (state.message or "").startswith("timed out after 0.05 min"), state.message
        assert state.exit_code == 137  # killed after the grace
        assert 3 <= took < 20
        texts = [line.text for line in await _lines(scheduler, handle)]
        assert texts == ["started", "TERM"]
        await scheduler.results(handle)
        assert (await scheduler.status(handle)).message == state.message  # as recorded
        await scheduler.close()

    run(go())


def test_the_time_limit_is_the_requests_capped_by_the_setting(
    podman: Podman, tmp_path: Path
) -> None:
    def label(resources: Resources, **container: Any) -> str | None:
        spec = JobSpec(
            key="k", job_id="j", name="n", image="i", command=["true"], resources=resources
        )
        body = render_dry_run(spec, podman.settings(tmp_path / "data", **container))["body"]
        return body["Labels"].get("j2c.io/time-limit-s")

    assert label(Resources()) is None
    assert label(Resources(time_limit_minutes=2)) == "120"
    assert label(Resources(time_limit_minutes=2), time_limit_minutes=0.5) == "30"
    assert label(Resources(), time_limit_minutes=0.05) == "3"
    with pytest.raises(Exception, match="time_limit_minutes"):
        podman.settings(tmp_path / "data", time_limit_minutes=0)
