"""Edit -> published over a real network: a one-line edit of the benchmark project, published to
moto's S3 server behind a proxy that adds ``--delay-ms`` (default 20 ms) to every request and to
every new connection (tests/storage/fault_proxy.py ``delay_s``: a round trip each, not one per
read of a body).

Side by side in one run, interleaved round by round, on the same packed result:

- j2c's ``publish`` (every blob's existence asked at once, bounded, the blobs the previous send
  did not see first; each missing one sent as soon as its own answer comes, then the manifest);
- the same blobs asked one after the other (``put_file`` per blob, as j2c did before and as a
  simple ``for`` loop over ``head_object`` + ``upload_file`` does).

Each round edits one line of a code file, packs (not timed: the send's scan and pack have their
own benchmarks) and publishes. Target: edit -> published <= 0.5 s over 20 ms.

Then the whole send, end to end (``--no-server`` skips it): two Jupyter servers with j2c (local
scheduler), one storing through the proxy, one straight to moto on loopback, each with its own
copy of the project. Round by round, interleaved, each edits one line and POSTs a new job; the
time is from the POST to the ``submitted`` event on the job's websocket (the scan, pack, publish
and the scheduler's submit). Target: edit -> ``submitted`` <= 0.5 s over 20 ms.

With ``--before DIR`` (a checkout of an earlier j2c, e.g. ``git worktree add DIR <commit>``),
two more servers run that code in the same rounds: before and after side by side, the before
side labelled with DIR's commit. The comparison the README quotes is against the commit just
before the concurrent publish (84a3223 "publish: every blob's existence asked at once"), that
is ``git worktree add DIR 84a3223^`` (efab083), which checks and sends one blob after another.

Every figure is a median with its sample count (the rounds), min and max beside it.

Run: ``python benchmarks/publish_latency.py [--rounds 5] [--delay-ms 20] [--no-server]
[--before DIR]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from inputs import bench_project
from upload import FAKE_ENV, REGION, boto3_client, start_moto

from j2c_server.config import StorageSettings
from j2c_server.pack import PackSpec, make_manifest, pack
from j2c_server.pack.publish import publish
from j2c_server.storage import open_store
from j2c_server.storage.base import ObjectStore, blob_key, file_blob_key, manifest_key
from tests.storage.fault_proxy import FaultProxy

TARGET_S = 0.5


def delayed_proxy(endpoint: str, delay_s: float) -> tuple[FaultProxy, int]:
    """The latency proxy (tests/storage/fault_proxy.py with ``delay_s``) in front of moto: each
    new connection and each request wait ``delay_s`` once (a round trip each), whatever the
    size of the body; its port."""
    proxy = FaultProxy(endpoint, delay_s=delay_s).start()
    return proxy, int(proxy.url.rsplit(":", 1)[1])


def checkout_label(folder: Path) -> str:
    """'<short hash> <subject>' of a checkout's HEAD (what ``--before`` ran), or its path."""
    done = subprocess.run(
        ["git", "-C", str(folder), "log", "-1", "--format=%h %s"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip()[:90] if done.returncode == 0 else str(folder)


async def publish_one_by_one(store: ObjectStore, result: object, manifest: object) -> None:
    """The sequential baseline: one existence check per blob, one after the other."""
    for packed in result.layers:  # type: ignore[attr-defined]
        await store.put_file(blob_key(packed.layer.digest), packed.path)
    for packed_file in result.files:  # type: ignore[attr-defined]
        await store.put_file(file_blob_key(packed_file.file.digest), packed_file.path)
    body = manifest.canonical_json()  # type: ignore[attr-defined]
    key = manifest_key(manifest.digest())  # type: ignore[attr-defined]
    await store.size(key)
    await store.put_bytes(key, body)


def make_project(project: Path, extra_files: int) -> None:
    """The benchmark project plus ``extra_files`` generated modules: a code layer in many
    parts, as a real package has."""
    shutil.copytree(bench_project(), project, symlinks=True)
    for i in range(extra_files):
        module = project / "src" / "generated" / f"mod{i:04d}.py"
        module.parent.mkdir(parents=True, exist_ok=True)
        module.write_text("".join(f"def f{j}(x):\n    return x + {i * j}\n" for j in range(200)))


async def main_async(rounds: int, delay_ms: float, extra_files: int) -> None:
    os.environ.update(FAKE_ENV)
    server, endpoint = start_moto()
    work = Path(tempfile.mkdtemp(prefix="j2c-publish-"))
    try:
        project = work / "project"
        make_project(project, extra_files)
        boto3_client(endpoint).create_bucket(Bucket="bench")
        proxy, port = delayed_proxy(endpoint, delay_ms / 1000)
        settings = StorageSettings(
            endpoint_url=f"http://127.0.0.1:{port}", region=REGION, addressing_style="path"
        )
        spec = PackSpec(code_path=str(project), call_path="train.py", venv_path=None)
        cache = work / "cache"
        edited = next(p for p in sorted(project.rglob("*.py")) if p.name != "train.py")
        times: dict[str, list[float]] = {"j2c publish": [], "one by one": []}
        blobs: list[int] = []
        # One store (client) per side for the whole run, as a server keeps its clients; the
        # first send of each prefix is not timed.
        stores = {
            label: open_store(f"s3://bench/{label.replace(' ', '-')}", settings) for label in times
        }
        for store in stores.values():
            first = pack(spec, cache)
            await publish(store, first, make_manifest(first))
        for n in range(rounds):
            for label, fn in (("j2c publish", publish), ("one by one", publish_one_by_one)):
                store = stores[label]
                edited.write_text(edited.read_text() + f"\n# edit {label} {n}\n")
                result = pack(spec, cache)
                manifest = make_manifest(result)
                started = time.perf_counter()
                await fn(store, result, manifest)
                times[label].append(time.perf_counter() - started)
                blobs.append(len(result.layers) + len(result.files))
        for store in stores.values():
            await store.close()
        proxy.stop()
        print(
            f"\nEdit -> published, {rounds} interleaved rounds, moto behind a proxy adding "
            f"{delay_ms:.0f} ms per request and per new connection ({proxy.requests} requests, "
            f"{proxy.connections} connections in all); {max(blobs)} blobs per send\n"
        )
        base = statistics.median(times["one by one"])
        for label, values in times.items():
            median = statistics.median(values)
            print(
                f"  {label:<12} median {median:6.3f} s of {len(values)}  (min {min(values):.3f}, "
                f"max {max(values):.3f})  {base / median:5.2f}x as fast as one by one"
            )
        j2c = statistics.median(times["j2c publish"])
        verdict = "met" if j2c <= TARGET_S else "missed"
        print(f"\n  target edit -> published <= {TARGET_S} s: {verdict} ({j2c:.3f} s)")
    finally:
        server.kill()
        shutil.rmtree(work, ignore_errors=True)


async def through_servers(
    rounds: int, delay_ms: float, extra_files: int, before: Path | None
) -> None:
    """Edit -> ``submitted`` through real servers: one storing through the delaying proxy,
    one straight to moto, interleaved round by round; with ``before`` (a checkout of an
    earlier j2c), two more servers running that code, in the same rounds."""
    from pipeline import Server

    os.environ.update(FAKE_ENV)
    moto, endpoint = start_moto()
    work = Path(tempfile.mkdtemp(prefix="j2c-publish-e2e-"))
    proxy, port = delayed_proxy(endpoint, delay_ms / 1000)
    over = f"over {delay_ms:.0f} ms"
    ports = {over: port, "loopback": int(endpoint.rsplit(":", 1)[1])}
    sources = {"": None} if before is None else {"": None, "before, ": before}
    if before is not None:
        print(f"\nbefore = {checkout_label(before)}")
    sides = {
        f"{version}{label}": (side_port, source)
        for version, source in sources.items()
        for label, side_port in ports.items()
    }
    own_path = os.environ.get("PYTHONPATH", "")
    try:
        boto3_client(endpoint).create_bucket(Bucket="bench")
        async with contextlib.AsyncExitStack() as stack:
            servers: dict[str, Server] = {}
            for n, (label, (side_port, source)) in enumerate(sides.items()):
                root = work / f"root{n}"
                make_project(root / "project", extra_files)
                # Its own entry point: the benchmark's train.py needs the benchmark venv.
                (root / "project" / "train.py").write_text("print('trained')\n")
                data = work / f"data{n}"
                config = data / "jupyter-config"
                config.mkdir(parents=True)
                # The job's j2c-unpack reads the store with the same (fake) credentials.
                pass_env = ["PYTHONPATH", *FAKE_ENV]
                (config / "j2c.yaml").write_text(
                    "storage:\n"
                    f"  url: s3://bench/side{n}\n"
                    f"  endpoint_url: http://127.0.0.1:{side_port}\n"
                    f"  region: {REGION}\n"
                    "  addressing_style: path\n"
                    f"scheduler:\n  local:\n    pass_env: {pass_env}\n"
                )
                os.environ["JUPYTER_CONFIG_DIR"] = str(config)
                # The server and its jobs import j2c from ``source`` when given.
                os.environ["PYTHONPATH"] = os.pathsep.join(
                    filter(None, [str(source or ""), own_path])
                )
                servers[label] = await stack.enter_async_context(Server(root, data))
            os.environ.pop("JUPYTER_CONFIG_DIR", None)
            os.environ["PYTHONPATH"] = own_path
            body = {"code_path": "project", "call_path": "project/train.py"}
            for server in servers.values():  # the cold send of each side is not timed
                await to_submitted(server, body)
            times: dict[str, list[float]] = {label: [] for label in servers}
            uploaded: dict[str, list[int]] = {label: [] for label in servers}
            for n in range(rounds):
                order = list(servers.items())
                shift = n % len(order)  # each round starts with another side
                for label, server in order[shift:] + order[:shift]:
                    edited = server.root / "project" / "train.py"
                    edited.write_text(edited.read_text() + f"\n# edit {n}\n")
                    seconds, sent = await to_submitted(server, {**body, "new": True})
                    times[label].append(seconds)
                    uploaded[label].append(sent)
        print(
            f"\nEdit -> submitted through a real server (local scheduler), {rounds} interleaved "
            f"rounds, the project + {extra_files} generated modules, no venv\n"
        )
        for label, values in times.items():
            print(
                f"  {label:<20} median {statistics.median(values):6.3f} s of {len(values)}  "
                f"(min {min(values):.3f}, max {max(values):.3f}), "
                f"{statistics.median(uploaded[label])} bytes uploaded"
            )
        median_over = statistics.median(times[over])
        verdict = "met" if median_over <= TARGET_S else "missed"
        print(f"\n  target edit -> submitted <= {TARGET_S} s over {delay_ms:.0f} ms: {verdict}")
    finally:
        proxy.stop()
        moto.kill()
        shutil.rmtree(work, ignore_errors=True)


async def to_submitted(server: object, body: dict[str, object]) -> tuple[float, int]:
    """POST a job; seconds from the POST to its ``submitted`` event, and the bytes uploaded.
    The job is followed to its end (not timed), so that it runs beside no later send, as a
    user edits again once they have seen the result."""
    started = time.perf_counter()
    record = await server.post("j2c/api/jobs", body)  # type: ignore[attr-defined]
    sent, submitted = -1, None
    async with server.stream(record["id"]) as events:  # type: ignore[attr-defined]
        async for _, event in events:
            if os.environ.get("BENCH_TRACE"):
                print(f"{time.perf_counter() - started:.3f}", str(event)[:160])
            if event["kind"] == "stage" and event.get("stage") == "upload" and "data" in event:
                sent = int(event["data"].get("bytes_uploaded", -1))
            elif event["kind"] == "status" and event["status"] == "submitted":
                submitted = time.perf_counter() - started
            elif event["kind"] == "status" and event["status"] == "succeeded":
                break
            elif event["kind"] == "status" and event["status"] in ("failed", "cancelled", "lost"):
                raise SystemExit(f"the job did not succeed: {event}")
    if submitted is None:
        raise SystemExit("the job's stream ended before submitted")
    return submitted, sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--delay-ms", type=float, default=20.0)
    parser.add_argument(
        "--extra-files", type=int, default=800, help="generated modules added to the project"
    )
    parser.add_argument("--no-server", action="store_true", help="skip the end-to-end part")
    parser.add_argument(
        "--before",
        type=Path,
        help="a checkout of an earlier j2c: its servers run in the same end-to-end rounds",
    )
    args = parser.parse_args()
    asyncio.run(main_async(args.rounds, args.delay_ms, args.extra_files))
    if not args.no_server:
        asyncio.run(through_servers(args.rounds, args.delay_ms, args.extra_files, args.before))


if __name__ == "__main__":
    main()
