"""The container backend behind a real Jupyter server: a project is sent over REST with
``scheduler: container``, packed into the embedded ``file://`` store and run by
``j2c-unpack`` in a real podman container of the platform image (no venv: the image's own
``python3`` runs the script).

- Send → live lines over the websocket → succeeded → artifacts listed and downloaded.
- Cancel of a running container job: status ``cancelled``, the container gone from the engine.
- A second job on the same machine never sees the first job's files.
- Jobs leave no container behind once their results are in, and still read their own status.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from tornado.httpclient import HTTPClientError

from j2c_server.wire.api import JobRecord, JobStatus
from tests.support.jobs import final_status, follow, log_lines, settle, submit
from tests.support.podman import Podman

# Job 1 leaves files in its HOME, its outputs and its working folder, then prints where they
# are; job 2 is handed those paths and tries to read each one.
LEAVE = """\
import os, sys
out = os.environ["J2C_OUTPUT_DIR"]
open(os.path.join(out, "secret.txt"), "w").write("job one's output")
open(os.path.join(os.environ["HOME"], "notes.txt"), "w").write("job one's home")
open("scratch.txt", "w").write("job one's work folder")
for path in (os.path.join(out, "secret.txt"), os.path.join(os.environ["HOME"], "notes.txt"),
             os.path.abspath("scratch.txt")):
    print("left", path, flush=True)
"""
PEEK = """\
import os, sys
for path in sys.argv[1:]:
    try:
        print("read", path, open(path).read(), flush=True)
    except FileNotFoundError:
        print("missing", path, flush=True)
    except PermissionError:
        print("refused", path, flush=True)
print("outputs", sorted(os.listdir(os.environ["J2C_OUTPUT_DIR"])), flush=True)
print("home", sorted(os.listdir(os.environ["HOME"])), flush=True)
"""


@pytest.fixture
def jp_server_config(podman: Podman, jp_server_config: dict[str, Any]) -> dict[str, Any]:
    overrides = {
        "default_image": podman.image,
        # The server runs as root here and the job as the default non-root uid: the store
        # must be readable by it.
        "storage": {"shared": True},
        "scheduler": {"container": {"socket": podman.socket, "cancel_grace_s": 2}},
    }
    return {**jp_server_config, "J2CApp": {"settings_overrides": overrides}}


@pytest.fixture
def container_project(project: Path) -> Path:
    (project / "leave.py").write_text(LEAVE)
    (project / "peek.py").write_text(PEEK)
    settle(project)
    return project


async def _record(jp_fetch: Any, job_id: str) -> JobRecord:
    return JobRecord.model_validate_json((await jp_fetch("j2c", "api", "jobs", job_id)).body)


async def _engine_has(podman: Podman, name: str) -> bool:
    transport = httpx.AsyncHTTPTransport(uds=podman.socket)
    async with httpx.AsyncClient(transport=transport, base_url="http://engine") as client:
        response = await client.get(f"/v1.41/containers/{name}/json")
    return response.status_code == 200


async def test_a_sent_job_streams_live_lines_succeeds_and_serves_its_artifacts(
    jp_fetch: Any, jp_ws_fetch: Any, container_project: Path, podman: Podman
) -> None:
    record = await submit(
        jp_fetch, scheduler="container", args=["--lines", "20", "--sleep", "0.05"]
    )
    events = await follow(jp_ws_fetch, record.id)
    assert final_status(events) == JobStatus.succeeded, [e.text for e in events][-20:]
    lines = log_lines(events)
    assert lines[0].startswith("pid ")  # the script's own first line, from the container
    assert lines[1:] == [f"line {i}" for i in range(20)]
    done = await _record(jp_fetch, record.id)
    assert done.scheduler == "container" and done.exit_code == 0
    assert done.handle is not None and done.handle.id.startswith("j2c-")
    # It ran on the engine (the handle names its container), and that container was
    # removed once its logs, exit code and outputs were collected.
    assert not await _engine_has(podman, done.handle.id)
    assert done.results is not None
    assert [a.name for a in done.results.artifacts] == ["result.txt"]
    response = await jp_fetch("j2c", "api", "jobs", record.id, "artifacts", "result.txt")
    assert response.body == b"done"


async def test_cancel_stops_the_container_and_the_job_is_cancelled(
    jp_fetch: Any, jp_ws_fetch: Any, container_project: Path, podman: Podman
) -> None:
    record = await submit(
        jp_fetch, scheduler="container", args=["--lines", "1000", "--sleep", "0.1"]
    )
    started = await follow(jp_ws_fetch, record.id, stop_after=1)
    while "line 2" not in log_lines(started):
        started += await follow(jp_ws_fetch, record.id, after=started[-1].seq, stop_after=1)
    running = await _record(jp_fetch, record.id)
    assert running.handle is not None
    name = running.handle.id
    assert await _engine_has(podman, name)

    began = time.monotonic()
    response = await jp_fetch("j2c", "api", "jobs", record.id, "cancel", method="POST", body="")
    assert JobRecord.model_validate_json(response.body).status == JobStatus.cancelling
    events = await follow(jp_ws_fetch, record.id, after=started[-1].seq)
    assert final_status(events) == JobStatus.cancelled
    assert time.monotonic() - began < 30
    # The script stops at SIGTERM (Python's default): no line after the cancel for long.
    assert "line 999" not in log_lines(events)
    done = await _record(jp_fetch, record.id)
    assert done.status == JobStatus.cancelled
    # Stopped (not running) on the engine, whatever it keeps for the record.
    transport = httpx.AsyncHTTPTransport(uds=podman.socket)
    async with httpx.AsyncClient(transport=transport, base_url="http://engine") as client:
        info = await client.get(f"/v1.41/containers/{name}/json")
    assert info.status_code == 404 or info.json()["State"]["Running"] is False


async def test_a_second_job_never_sees_the_first_jobs_files(
    jp_fetch: Any, jp_ws_fetch: Any, container_project: Path, podman: Podman, j2c_data_dir: Path
) -> None:
    first = await submit(jp_fetch, scheduler="container", call_path="proj/leave.py")
    first_events = await follow(jp_ws_fetch, first.id)
    assert final_status(first_events) == JobStatus.succeeded
    left = [line.split(" ", 1)[1] for line in log_lines(first_events) if line.startswith("left ")]
    assert len(left) == 3
    # The first job's record points at its own store outputs too: try those paths as well.
    done = await _record(jp_fetch, first.id)
    assert done.results is not None and done.results.output_uri
    stored = [a.url for a in done.results.artifacts if a.url and a.url.startswith("file://")]
    # ... and its copy in the store, and its manifest (job 2's manifest is another one).
    assert done.manifest_uri and done.manifest_uri.startswith("file://")
    manifest = done.manifest_uri[len("file://") :]
    in_store = j2c_data_dir / "store" / "jobs" / first.id / "outputs" / "secret.txt"
    assert in_store.read_text() == "job one's output"
    paths = [*left, *(url[len("file://") :] for url in stored), str(in_store), manifest]

    second = await submit(jp_fetch, scheduler="container", call_path="proj/peek.py", args=paths)
    events = await follow(jp_ws_fetch, second.id)
    assert final_status(events) == JobStatus.succeeded, [e.text for e in events][-20:]
    assert (await _record(jp_fetch, second.id)).manifest_uri != done.manifest_uri
    lines = log_lines(events)
    assert not [line for line in lines if line.startswith("read ")], lines
    assert len([line for line in lines if line.startswith(("missing ", "refused "))]) == len(paths)
    assert "outputs []" in lines  # its own, empty outputs folder
    assert not any("notes.txt" in line for line in lines if line.startswith("home "))
    # And the first job's artifact is still there, served to its own job only.
    response = await jp_fetch("j2c", "api", "jobs", first.id, "artifacts", "secret.txt")
    assert response.body == b"job one's output"
    with pytest.raises(HTTPClientError) as refused:
        await jp_fetch("j2c", "api", "jobs", second.id, "artifacts", "secret.txt")
    assert refused.value.code == 404


async def _managed_containers(podman: Podman) -> list[str]:
    transport = httpx.AsyncHTTPTransport(uds=podman.socket)
    async with httpx.AsyncClient(transport=transport, base_url="http://engine") as client:
        response = await client.get(
            "/v1.41/containers/json",
            params={"all": "1", "filters": '{"label": ["j2c.io/managed-by=j2c"]}'},
        )
    return [str(entry["Names"][0]).lstrip("/") for entry in response.json()]


async def test_jobs_leave_no_container_behind_after_their_results(
    jp_fetch: Any, jp_ws_fetch: Any, container_project: Path, podman: Podman
) -> None:
    names = []
    for lines in ("2", "3"):
        record = await submit(jp_fetch, scheduler="container", args=["--lines", lines])
        events = await follow(jp_ws_fetch, record.id)
        assert final_status(events) == JobStatus.succeeded, [e.text for e in events][-20:]
        done = await _record(jp_fetch, record.id)
        assert done.handle is not None and done.results is not None
        names.append(done.handle.id)
        assert not await _engine_has(podman, done.handle.id)
        assert done.status == JobStatus.succeeded and done.exit_code == 0
    assert not set(names) & set(await _managed_containers(podman))
