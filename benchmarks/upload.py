"""S3 upload: j2c's store against boto3's ``upload_file`` and a single ``put_object``.

All methods send the same file (random bytes, ``.bench/upload-<N>MB.bin``) to the same moto
server (server mode, its own process, on loopback). Each upload runs in a fresh subprocess that
reports its wall time and its peak RSS (``resource.getrusage``), both before the upload (after
imports and client creation) and at the end, so the table shows what the transfer itself costs
in memory. Each method runs ``--repeat`` times, interleaved, each round starting with another
method; the table shows medians.

    python benchmarks/upload.py [--size-mb 256] [--repeat 3]

j2c runs with its defaults (16 MiB parts, 8 concurrent); boto3 with TransferManager defaults
(8 MiB parts, 10 threads). The last row is j2c uploading a content-addressed blob the store
already holds: one HEAD request. Client CPU is the uploading process's (user + system, threads
included) during the upload; the verdict compares j2c's medians with ``upload_file``'s: at least
as fast, with no more client CPU. moto verifies no checksum, so j2c checks every part's MD5
against its ETag there (0.44 s of CPU per 256 MB), which servers that verify the CRC32 spare it:
the row "j2c, CRC32 answered back" is j2c's code path on such a server (AWS S3, MinIO), its
client told by a botocore hook that moto answered each part's CRC32 back, as they do.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = REPO_ROOT / ".bench"
BUCKET = "j2c-bench"
REGION = "us-east-1"
ECHO = "j2c, CRC32 answered back"
METHODS = ("j2c", ECHO, "boto3 upload_file", "boto3 put_object", "j2c, blob already stored")
BASELINE = "boto3 upload_file"
FAKE_ENV = {
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_EC2_METADATA_DISABLED": "true",
}


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# ---------------------------------------------------------------------------- inputs


def bench_file(size_mb: int) -> Path:
    """Random bytes (incompressible, like a zstd layer), written once and reused."""
    path = BENCH_DIR / f"upload-{size_mb}MB.bin"
    if path.exists() and path.stat().st_size == size_mb * 1024 * 1024:
        return path
    BENCH_DIR.mkdir(exist_ok=True)
    partial = path.with_suffix(".partial")
    with partial.open("wb") as out:
        for _ in range(size_mb):
            out.write(os.urandom(1024 * 1024))
    partial.rename(path)
    return path


def start_moto(host: str = "127.0.0.1") -> tuple[subprocess.Popen[bytes], str]:
    """moto's server listening on ``host`` (an address of this machine): it and its endpoint."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", host, "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **FAKE_ENV},
    )
    for _ in range(300):
        try:
            socket.create_connection((host, port), timeout=0.5).close()
            return server, f"http://{host}:{port}"
        except OSError:
            time.sleep(0.1)
    server.kill()
    raise SystemExit("moto server did not start")


def boto3_client(endpoint: str) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        config=Config(s3={"addressing_style": "path"}),
    )


# ---------------------------------------------------------------------------- workers


def answer_crc32_back(client: Any) -> None:
    """Make moto's part answers carry the part's CRC32, as a server that verifies it answers."""

    def remember(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context["bench_crc32"] = params["headers"].get("x-amz-checksum-crc32")

    def answer(parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        if context.get("bench_crc32"):
            parsed["ChecksumCRC32"] = context["bench_crc32"]

    client.meta.events.register("before-call.s3.UploadPart", remember)
    client.meta.events.register("after-call.s3.UploadPart", answer)


def run_j2c(
    endpoint: str, path: Path, key: str, sha256: str | None, *, echo: bool = False
) -> dict[str, float]:
    from j2c_server.config import StorageSettings
    from j2c_server.storage import open_store

    settings = StorageSettings(endpoint_url=endpoint, region=REGION, addressing_style="path")

    async def upload() -> dict[str, float]:
        store = open_store(f"s3://{BUCKET}/j2c", settings)
        await store.exists("warm-up")  # creates the client, as boto3.client() does below
        if echo:
            answer_crc32_back(await store._s3())  # type: ignore[attr-defined]
        before, cpu = peak_rss_mb(), cpu_seconds()
        start = time.perf_counter()
        await store.put_file(key if sha256 is None else f"blobs/sha256/{sha256}.tar.zst", path)
        seconds = time.perf_counter() - start
        cpu = cpu_seconds() - cpu
        await store.close()
        return {"seconds": seconds, "cpu_s": cpu, "rss_before_mb": before}

    return asyncio.run(upload())


def run_boto3(endpoint: str, path: Path, key: str, single_put: bool) -> dict[str, float]:
    client = boto3_client(endpoint)
    client.list_buckets()  # open a connection first, as j2c's warm-up does
    before, cpu = peak_rss_mb(), cpu_seconds()
    start = time.perf_counter()
    if single_put:
        with path.open("rb") as body:
            client.put_object(Bucket=BUCKET, Key=key, Body=body)
    else:
        client.upload_file(str(path), BUCKET, key)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "cpu_s": cpu_seconds() - cpu, "rss_before_mb": before}


def worker(method: str, endpoint: str, path: Path, key: str, sha256: str) -> None:
    os.environ.update(FAKE_ENV)
    if method in ("j2c", ECHO):
        result = run_j2c(endpoint, path, key, None, echo=method == ECHO)
    elif method == "j2c, blob already stored":
        result = run_j2c(endpoint, path, key, sha256)
    else:
        result = run_boto3(endpoint, path, key, single_put=method == "boto3 put_object")
    result["rss_peak_mb"] = peak_rss_mb()
    print(json.dumps(result))


# ---------------------------------------------------------------------------- driver


def measure(
    method: str, server: subprocess.Popen[bytes], endpoint: str, path: Path, key: str, sha256: str
) -> dict[str, float]:
    import psutil

    args = [sys.executable, __file__, "--worker", method, endpoint, str(path), key, sha256]
    moto = psutil.Process(server.pid)
    server_cpu = sum(moto.cpu_times()[:2])
    out = subprocess.run(args, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{method} failed:\n{out.stderr[-3000:]}")
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    result["server_cpu_s"] = sum(moto.cpu_times()[:2]) - server_cpu
    return result


def sha256_of(path: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    with path.open("rb") as source:
        while block := source.read(8 * 1024 * 1024):
            digest.update(block)
    return digest.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    os.environ.update(FAKE_ENV)

    path = bench_file(args.size_mb)
    sha256 = sha256_of(path)
    server, endpoint = start_moto()
    results: dict[str, list[dict[str, float]]] = {method: [] for method in METHODS}
    try:
        client = boto3_client(endpoint)
        client.create_bucket(Bucket=BUCKET)
        measure("j2c, blob already stored", server, endpoint, path, "", sha256)  # stores it once
        for round_ in range(args.repeat):
            # Each round starts with another method, so none always runs first.
            shift = round_ % len(METHODS)
            for method in METHODS[shift:] + METHODS[:shift]:
                key = f"runs/{round_}/{method.replace(' ', '-').replace(',', '')}"
                results[method].append(measure(method, server, endpoint, path, key, sha256))
                if method != "j2c, blob already stored":
                    client.delete_object(Bucket=BUCKET, Key=key)
                    client.delete_object(Bucket=BUCKET, Key=f"j2c/{key}")
    finally:
        server.terminate()
        server.wait(timeout=30)

    size_mb = path.stat().st_size / 1e6
    base = statistics.median(r["seconds"] for r in results[BASELINE])
    print(f"\nS3 upload of {size_mb:.0f} MB to moto (loopback), median of {args.repeat} runs\n")
    columns = ["seconds", "MB/s", "vs upload_file", "client CPU s", "server CPU s"]
    columns += ["peak RSS MB", "RSS added MB"]
    header = f"{'method':<26}" + "".join(f" {name:>14}" for name in columns)
    print(header)
    print("-" * len(header))
    for method in METHODS:
        runs = results[method]

        def median(field: str, runs: list[dict[str, float]] = runs) -> float:
            return statistics.median(r[field] for r in runs)

        seconds = median("seconds")
        added = statistics.median(r["rss_peak_mb"] - r["rss_before_mb"] for r in runs)
        speed = f"{size_mb / seconds:.1f}" if method != "j2c, blob already stored" else "-"
        cells = [
            f"{seconds:.2f}",
            speed,
            f"{base / seconds:.2f}x",
            f"{median('cpu_s'):.2f}",
            f"{median('server_cpu_s'):.2f}",
            f"{median('rss_peak_mb'):.0f}",
            f"{added:.0f}",
        ]
        print(f"{method:<26}" + "".join(f" {cell:>14}" for cell in cells))
    cpu_base = statistics.median(r["cpu_s"] for r in results[BASELINE])
    for method in ("j2c", ECHO):
        speed = base / statistics.median(r["seconds"] for r in results[method])
        cpu = statistics.median(r["cpu_s"] for r in results[method])
        print(
            f"\n{method}: >= 1.0x upload_file {'met' if speed >= 1.0 else 'missed'} "
            f"({speed:.2f}x); client CPU <= upload_file's "
            f"{'met' if cpu <= cpu_base else 'missed'} ({cpu:.2f} vs {cpu_base:.2f} s)",
            end="",
        )
    print()
    print(
        "\nvs upload_file > 1 means faster than boto3's upload_file. CPU seconds are those of the"
        "\nuploading process and of the moto server during the upload: on a shared machine they"
        "\nvary less than wall time."
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3], Path(sys.argv[4]), sys.argv[5], sys.argv[6])
    else:
        main()
