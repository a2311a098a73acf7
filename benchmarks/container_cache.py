"""The node layer cache through the container backend: submit -> first line of user code, cold
vs warm, with the default placement (``original``) and with ``relocate``, on a real engine.

Each round, interleaved: for each placement, a fresh cache folder (cold: download from the
``file://`` store, verify, extract into the cache, relocate, prove, run) then the same manifest
again (warm: fingerprint checks, code copied, venv linked or used in place). The time is from
``ContainerScheduler.submit`` to the job's first stdout line (``FIRST LINE``), through the
engine's create/start and log stream, as a user waits for it. The project is a small one; the
venv is made with this interpreter (``--system-site-packages``, pip in it: about 1.5k files) or
given with ``--venv`` (e.g. ``.bench/venv``, the 400 MB benchmark venv of inputs.py), which is
copied into the benchmark's temporary folder first: ``original`` needs the venv's path to be
creatable inside the container (``/tmp`` is, the repository's folder is not). Medians of the
rounds with their count, best beside them; the ratio is of the medians.

With ``--store s3`` the layers are in an S3 store, as on a cluster (moto's server on this machine,
reached at this machine's address; each job gets a presigned manifest, as with
``storage.presign_for_jobs``): a cold start downloads the layers, a warm one only the manifest.
The default, ``file``, is the embedded store, a folder mounted into the container: a cold start
that reads its layers from the local disk, the best case for cold.

Run: ``J2C_PODMAN_DIR=... python benchmarks/container_cache.py [--rounds 3] [--venv DIR]
[--image A --image B] [--store file|s3]`` (``scripts/platform-image.sh DIR`` starts podman and
builds the image; tag the image of each j2c version to compare them in the same rounds).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.exports import read_exports  # noqa: E402


def _publish(work: Path, venv: Path | None, store: Path, s3: str | None = None) -> Any:
    """The project (and ``venv``) packed and published to the ``file://`` store at ``store``,
    or to moto at ``s3`` (its endpoint): the manifest's URI, or for S3 the manifest, to
    presign per job."""
    from j2c_server.pack import PackSpec, make_manifest, pack, publish
    from j2c_server.storage import open_store

    project = work / "project"
    project.mkdir(parents=True, exist_ok=True)
    (project / "first.py").write_text('print("FIRST LINE", flush=True)\n')
    for index in range(200):
        (project / f"module_{index}.py").write_text("X = 1\n" * 50)
    old = time.time() - 3600
    for path in [project, *project.iterdir()]:
        os.utime(path, (old, old))
    result = pack(PackSpec(code_path=project, call_path="first.py", venv_path=venv), work / "pc")
    from j2c_server.storage.settings import StorageSettings

    if s3 is not None:
        settings = StorageSettings(endpoint_url=s3, region="us-east-1", addressing_style="path")

        async def to_s3() -> Any:
            opened = open_store("s3://bench/j2c", settings)
            manifest = make_manifest(result)
            try:
                await publish(opened, result, manifest)
            finally:
                await opened.close()
            return manifest

        return asyncio.run(to_s3())
    # Shared: the job's uid (1000) reads the store.
    opened = open_store(store.as_uri(), StorageSettings(shared=True))
    published = asyncio.run(publish(opened, result, make_manifest(result)))
    return published.manifest_uri


def _copied(venv: Path, target: Path) -> Path:
    """``venv`` copied to ``target`` (mtimes kept: its bytecode stays valid), the paths it
    embeds rewritten by j2c-unpack's own relocation, and proved to run there."""
    from j2c_server.unpack.interpreter import this_interpreter
    from j2c_server.unpack.relocate import fix_venv, verify_venv

    subprocess.run(["cp", "-a", str(venv), str(target)], check=True)
    fix_venv(target, this_interpreter(), {str(venv.resolve()): str(target)})
    verify_venv(target)
    return target


async def _one(settings: Any, image: str, manifest: Any, placement: str) -> tuple[float, str]:
    from j2c_server.schedulers.container.backend import ContainerScheduler

    scheduler = ContainerScheduler(settings)
    if isinstance(manifest, str):
        return await first_line(scheduler, image, manifest, placement)
    # S3: a presigned manifest of its own per job (made before the clock starts, as the
    # server makes it before the submit).
    from j2c_server.jobs.send.inputs import presigned_manifest
    from j2c_server.storage import open_store

    store = open_store(settings.storage.url, settings.storage)
    try:
        job = f"b{time.monotonic_ns()}"
        url, digest = await presigned_manifest(settings, store, manifest, job)
    finally:
        await store.close()
    return await first_line(scheduler, image, url, placement, extra=["--manifest-digest", digest])


async def first_line(
    scheduler: object,
    image: str | None,
    manifest: str,
    placement: str,
    extra: list[str] | None = None,
) -> tuple[float, str]:
    """Seconds from submit to the job's ``FIRST LINE``, and its cache line; closes
    ``scheduler`` (any backend: ``slurm_cache.py`` times Slurm with it)."""
    from j2c_server.schedulers.base import JobSpec, Scheduler

    assert isinstance(scheduler, Scheduler)
    spec = JobSpec(
        key=f"bench-{time.monotonic_ns()}",
        job_id=f"b{time.monotonic_ns()}",
        name="bench",
        image=image,
        command=["j2c-unpack", manifest, *(extra or []), "--paths", placement, "--"],
    )
    started = time.perf_counter()
    first = None
    cache_line = ""
    seen: list[str] = []
    try:
        handle = await scheduler.submit(spec)
        async for line in scheduler.follow_logs(handle):
            seen.append(line.text)
            if first is None and line.text == "FIRST LINE":
                first = time.perf_counter() - started
            if "layers from the cache" in line.text:
                cache_line = line.text
            if placement == "original" and "relocating under" in line.text:
                raise SystemExit(f"--paths original fell back to relocating: {line.text}")
            if os.environ.get("BENCH_VERBOSE") and line.text.startswith("j2c: "):
                print(f"    {time.perf_counter() - started:6.2f}  {line.text[:110]}")
        await scheduler.results(handle)
    finally:
        await scheduler.close()
    if first is None:
        raise SystemExit(f"the job printed no FIRST LINE ({placement}):\n" + "\n".join(seen[-15:]))
    return first, cache_line


def cold_warm_table(samples: dict[tuple[str, str], list[float]]) -> None:
    """Medians (best) per placement, cold beside warm, their sample counts, and the ratio of
    the medians (never of the best values)."""
    print("\nplacement  | n | cold median (best) | warm median (best) | cold / warm, medians")
    for placement in ("original", "relocate"):
        cold, warm = samples[(placement, "cold")], samples[(placement, "warm")]
        ratio = statistics.median(cold) / statistics.median(warm)
        print(
            f"{placement:10} | {min(len(cold), len(warm))} | {statistics.median(cold):.2f} s "
            f"({min(cold):.2f}) | {statistics.median(warm):.2f} s ({min(warm):.2f}) | {ratio:.1f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--venv", type=Path)
    parser.add_argument("--store", choices=("file", "s3"), default="file")
    parser.add_argument(
        "--image",
        action="append",
        help="the job image (default: the platform image); given twice or more, the images take "
        "turns in every round (an A/B of two j2c versions, side by side)",
    )
    options = parser.parse_args()
    podman = Path(os.environ.get("J2C_PODMAN_DIR", "/nonexistent"))
    if not (podman / "env").is_file():
        raise SystemExit("set J2C_PODMAN_DIR to a folder scripts/platform-image.sh started")
    values = read_exports(podman)
    os.environ["CONTAINERS_CONF"] = values["CONTAINERS_CONF"]
    work = Path(tempfile.mkdtemp(prefix="j2c-bench-container-cache-"))
    venv = work / "venv"
    if options.venv is not None:
        _copied(options.venv, venv)
    else:
        subprocess.run(
            [sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True
        )
    data = work / "data"
    moto, endpoint = None, None
    if options.store == "s3":
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from upload import FAKE_ENV, boto3_client, start_moto

        os.environ.update(FAKE_ENV)
        # This machine's own address, which the containers reach through the engine's
        # network (a rootful engine refuses the host's network to jobs).
        address = subprocess.run(["hostname", "-I"], capture_output=True, text=True, check=True)
        moto, endpoint = start_moto(address.stdout.split()[0])
        boto3_client(endpoint).create_bucket(Bucket="bench")
    try:
        run_rounds(options, values, work, venv, data, endpoint)
    finally:
        if moto is not None:
            moto.kill()
        shutil.rmtree(work, ignore_errors=True)  # ~0.5 GB of cache per placement and round


def run_rounds(
    options: argparse.Namespace,
    values: dict[str, str],
    work: Path,
    venv: Path,
    data: Path,
    s3: str | None,
) -> None:
    from j2c_server.config import load_settings

    manifest = _publish(work, venv, data / "store", s3)
    store = {"url": (data / "store").as_uri(), "shared": True}
    if s3 is not None:
        store = {"url": "s3://bench/j2c", "endpoint_url": s3, "region": "us-east-1"}
        store |= {"addressing_style": "path", "presign_for_jobs": True}
    images = options.image or [values["PLATFORM_IMAGE"]]
    samples: dict[str, dict[tuple[str, str], list[float]]] = {image: {} for image in images}
    for round_, (number, image), placement in itertools.product(
        range(options.rounds), enumerate(images), ("original", "relocate")
    ):
        settings = load_settings(
            environ={},
            overrides={
                "data_dir": str(data),
                "storage": store,
                "scheduler": {
                    "container": {
                        "socket": values["J2C_SCHEDULER__CONTAINER__SOCKET"],
                        "cache_dir": str(work / f"cache-{number}-{placement}-{round_}"),
                    }
                },
            },
        )
        for kind in ("cold", "warm"):
            seconds, line = asyncio.run(_one(settings, image, manifest, placement))
            samples[image].setdefault((placement, kind), []).append(seconds)
            which = f"{image} " if len(images) > 1 else ""
            print(f"round {round_ + 1} {which}{placement:8} {kind}: {seconds:.2f} s  {line}")
    for image in images:
        print(f"\n{image}" if len(images) > 1 else "", end="")
        cold_warm_table(samples[image])


if __name__ == "__main__":
    main()
