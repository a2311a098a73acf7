"""Registry at scale: a real Jupyter server whose registry holds ``--jobs`` finished jobs and
``--events`` events in all, and how long the reads a user waits on take there.

The fixture is written straight into the registry file (the server's own schema, migrated by
the j2c under test): every job finished, each with a log of ``--events / --jobs`` lines but one
big job that holds a tenth of all events. Then, through the server's REST routes and its
websocket, ``--repeat`` times each:

- ``GET /jobs``: the job list as the sidebar asks for it (the first page);
- ``GET /jobs?limit=200&before=...``: a page deep in the list (the 20th);
- ``GET /jobs/{id}``: one job;
- ``GET /jobs/{id}/events?after=0``: opening a finished job's log, first page (a typical job
  and the big one);
- the websocket ``/jobs/{id}/stream?after=0`` of the big job: time to its first event and to
  its first 1000 events (one message each, read by this Python client).

The list keeps each unchanged job's JSON (``registry_paging``), so repeated reads of a page are
warm; the first ``GET /jobs`` after the server started is printed on its own (cold).

Prints p50/p95/max in ms and the size of the first ``GET /jobs`` answer. Run:
``python benchmarks/registry_scale.py [--jobs 10000 --events 1000000] [--compact]``.

With ``--compact`` the server first runs with compaction off; then every job is compacted into
its stored log (``event_archive``, timed: the archive write and the one delete transaction, the
big job's apart), the registry's size is printed before, after and after a ``VACUUM``, and the
log reads (a typical job's first page, a 1000-event job's full log over REST and the websocket,
the big job's first page) are measured again on a server over the compacted registry.

The server imports j2c from ``PYTHONPATH``, so another checkout can be measured against the same
fixture (an older j2c without paging answers ``GET /jobs`` with every job).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import percentile
from pipeline import Server
from tornado.websocket import websocket_connect

from j2c_server.registry import archive as event_archive
from j2c_server.registry.db import connect as _connect
from j2c_server.registry.job_registry import REGISTRY_FILE, Registry
from j2c_server.wire.api import JobRecord

T0 = 1_790_000_000.0


def _record(job_id: str, at: float, last_seq: int) -> str:
    """A finished job's record, shaped like the server's (request, stages, results)."""
    stages = {
        name: {
            "stage": name,
            "key": f"{name}-{job_id}",
            "state": "finished",
            "started_at": at + i,
            "finished_at": at + i + 1,
            "seconds": 1.0,
        }
        for i, name in enumerate(("scan", "pack", "upload", "submit", "watch", "results"))
    }
    return json.dumps(
        {
            "id": job_id,
            "name": "train.py",
            "key": f"k{job_id}",
            "status": "succeeded",
            "request": {
                "code_path": "digits",
                "call_path": "digits/train.py",
                "args": ["--epochs", "20"],
                "env": {"EXPERIMENT": job_id},
            },
            "scheduler": "local",
            "created_at": at,
            "updated_at": at + 60,
            "started_at": at + 5,
            "finished_at": at + 60,
            "stages": stages,
            "exit_code": 0,
            "last_seq": last_seq,
        }
    )


MID_EVENTS = 1000  # one job's full log, read whole


def build(data: Path, jobs: int, events: int) -> tuple[list[str], str, float]:
    """Write the fixture; returns the job ids (newest first), the big job's id, seconds.
    The job a quarter in holds :data:`MID_EVENTS` events (``mid_job``)."""
    start = time.time()
    Registry(data / REGISTRY_FILE).close()  # the schema of the j2c under test
    JobRecord.model_validate_json(_record("check", T0, 1))  # the fixture is what j2c reads
    big_events = events // 10
    per_job = max(2, (events - big_events) // max(1, jobs - 1))
    conn = sqlite3.connect(data / REGISTRY_FILE, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("BEGIN")
    ids = []
    big = ""
    for j in range(jobs):
        job_id = f"20260101-{j:06d}-{j * 7919 % 0xFFFFFF:06x}"
        at = T0 + j * 60
        count = big_events if j == jobs // 2 else MID_EVENTS if j == jobs // 4 else per_job
        if j == jobs // 2:
            big = job_id
        conn.execute(
            "INSERT INTO jobs (id, key, status, record, created_at, updated_at, last_seq) "
            "VALUES (?, ?, 'succeeded', ?, ?, ?, ?)",
            (job_id, f"k{job_id}", _record(job_id, at, count), at, at + 60, count),
        )
        conn.executemany(
            "INSERT INTO events (job_id, seq, event) VALUES (?, ?, ?)",
            (
                (
                    job_id,
                    seq,
                    json.dumps(
                        {
                            "job_id": job_id,
                            "seq": seq,
                            "time": at + seq * 0.01,
                            "kind": "log",
                            "stream": "stdout",
                            "text": f"epoch {seq}/{count} loss=0.{seq % 9973:04d} "
                            f"accuracy=0.{seq % 997:03d} lr=0.001 step {seq * 32}",
                        }
                    ),
                )
                for seq in range(1, count)
            ),
        )
        # The last event says the job ended, as the server's own last event does.
        final = {"job_id": job_id, "seq": count, "time": at + 60, "kind": "status"}
        conn.execute(
            "INSERT INTO events (job_id, seq, event) VALUES (?, ?, ?)",
            (job_id, count, json.dumps({**final, "status": "succeeded"})),
        )
        ids.append(job_id)
    conn.execute("COMMIT")
    conn.close()
    return ids[::-1], big, time.time() - start


async def _timed(label: str, repeat: int, call: object) -> tuple[str, list[float]]:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        await call()  # type: ignore[operator]
        samples.append(time.perf_counter() - start)
    return label, samples


async def measure(server: Server, ids: list[str], big: str, repeat: int) -> None:
    start = time.perf_counter()
    first = await server.http.fetch(server._request("j2c/api/jobs"))
    cold = time.perf_counter() - start
    listed = json.loads(first.body)
    print(
        f"GET /jobs: {len(listed)} jobs, {len(first.body) / 1e6:.2f} MB; "
        f"first request after the server started: {cold * 1e3:.0f} ms"
    )
    # The 20th page's cursor, from the 19th page's last job (the server's own cursor form).
    deep = ids[min(len(ids) - 1, 19 * 200 - 1)]
    typical = ids[len(ids) // 3]
    rows = [
        await _timed(
            "GET /jobs (first page)",
            repeat,
            lambda: server.http.fetch(server._request("j2c/api/jobs")),
        ),
        await _timed(
            "GET /jobs?limit=200&before= (20th page)",
            repeat,
            lambda: server.http.fetch(
                server._request(f"j2c/api/jobs?limit=200&before={_cursor(deep)}")
            ),
        ),
        await _timed(
            "GET /jobs/{id}",
            repeat,
            lambda: server.http.fetch(server._request(f"j2c/api/jobs/{typical}")),
        ),
        await _timed(
            "GET /jobs/{id}/events?after=0 (typical job)",
            repeat,
            lambda: server.http.fetch(server._request(f"j2c/api/jobs/{typical}/events?after=0")),
        ),
        await _timed(
            "GET /jobs/{id}/events?after=0 (big job, first page)",
            repeat,
            lambda: server.http.fetch(server._request(f"j2c/api/jobs/{big}/events?after=0")),
        ),
        await _timed(
            "websocket ?after=0 (big job): first event",
            repeat,
            lambda: _first_events(server, big, 1),
        ),
        await _timed(
            "websocket ?after=0 (big job): first 1000 events",
            repeat,
            lambda: _first_events(server, big, 1000),
        ),
    ]
    print("\n| read | p50 ms | p95 ms | max ms |\n|---|---|---|---|")
    for label, samples in rows:
        print(
            f"| {label} | {percentile(samples, 50) * 1e3:.1f} | "
            f"{percentile(samples, 95) * 1e3:.1f} | {max(samples) * 1e3:.1f} |"
        )


def mid_job(ids: list[str]) -> str:
    jobs = len(ids)
    return ids[::-1][jobs // 4]


async def measure_logs(
    server: Server, ids: list[str], big: str, repeat: int
) -> dict[str, list[float]]:
    """The log reads that compaction could change, through the server."""
    typical, mid = ids[len(ids) // 3], mid_job(ids)
    with sqlite3.connect(server.data / REGISTRY_FILE) as conn:
        (last,) = conn.execute("SELECT last_seq FROM jobs WHERE id = ?", (big,)).fetchone()
    tail = max(0, last - 1000)
    get = server.http.fetch
    rows = [
        await _timed(
            "typical job: GET events?after=0",
            repeat,
            lambda: get(server._request(f"j2c/api/jobs/{typical}/events?after=0")),
        ),
        await _timed(
            f"{MID_EVENTS}-event job: GET events?after=0&limit={MID_EVENTS} (full log)",
            repeat,
            lambda: get(server._request(f"j2c/api/jobs/{mid}/events?after=0&limit={MID_EVENTS}")),
        ),
        await _timed(
            f"{MID_EVENTS}-event job: GET events?after=900&limit=100 (last page)",
            repeat,
            lambda: get(server._request(f"j2c/api/jobs/{mid}/events?after=900&limit=100")),
        ),
        await _timed(
            f"{MID_EVENTS}-event job: websocket ?after=0, full log",
            repeat,
            lambda: _first_events(server, mid, MID_EVENTS),
        ),
        await _timed(
            "big job: GET events?after=0 (first page)",
            repeat,
            lambda: get(server._request(f"j2c/api/jobs/{big}/events?after=0")),
        ),
        await _timed(
            "big job: GET events, the last 1000 (a page at the end)",
            repeat,
            lambda: get(server._request(f"j2c/api/jobs/{big}/events?after={tail}&limit=1000")),
        ),
        await _timed(
            "big job: websocket ?after=0, first 1000 events",
            repeat,
            lambda: _first_events(server, big, 1000),
        ),
    ]
    return dict(rows)


def compact_all(data: Path, big: str) -> None:
    """Compact every job, timing the archive writes and the delete transactions."""
    path = data / REGISTRY_FILE
    conn = _connect(path)
    ids = [r[0] for r in conn.execute("SELECT id FROM jobs ORDER BY updated_at")]
    writes, commits = [], []
    big_times = (0.0, 0.0)
    start = time.perf_counter()
    for job_id in ids:
        t0 = time.perf_counter()
        written = event_archive.write_archive(conn, data, job_id)
        t1 = time.perf_counter()
        assert written is not None and event_archive.commit_archive(conn, data, written)
        t2 = time.perf_counter()
        if job_id == big:
            big_times = (t1 - t0, t2 - t1)
        else:
            writes.append(t1 - t0)
            commits.append(t2 - t1)
    took = time.perf_counter() - start
    conn.close()
    archive = sum(p.stat().st_size for p in event_archive.archive_dir(data).iterdir())
    print(
        f"compacted {len(ids)} jobs in {took:.1f} s ({len(ids) / took:.0f} jobs/s); archives "
        f"{archive / 1e6:.1f} MB in all\n"
        f"per job (not the big one): archive write p50 {percentile(writes, 50) * 1e3:.1f} ms "
        f"p95 {percentile(writes, 95) * 1e3:.1f} ms; delete transaction p50 "
        f"{percentile(commits, 50) * 1e3:.1f} ms p95 {percentile(commits, 95) * 1e3:.1f} ms\n"
        f"the big job: archive write {big_times[0] * 1e3:.0f} ms, delete transaction "
        f"(the write lock held) {big_times[1] * 1e3:.0f} ms"
    )


def registry_size(data: Path) -> str:
    path = data / REGISTRY_FILE
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    (free,) = conn.execute("PRAGMA freelist_count").fetchone()
    (size,) = conn.execute("PRAGMA page_size").fetchone()
    conn.close()
    mb = 1e6
    return f"{path.stat().st_size / mb:.0f} MB ({free * size / mb:.0f} MB of it free pages)"


async def compare(data: Path, root: Path, ids: list[str], big: str, repeat: int) -> None:
    print(f"registry before compaction: {registry_size(data)}")
    async with Server(root, data) as server:
        before = await measure_logs(server, ids, big, repeat)
    compact_all(data, big)
    print(f"registry after compaction: {registry_size(data)}")
    conn = sqlite3.connect(data / REGISTRY_FILE)
    start = time.perf_counter()
    conn.execute("VACUUM")
    conn.close()
    print(
        f"after VACUUM ({time.perf_counter() - start:.1f} s, server stopped): {registry_size(data)}"
    )
    async with Server(root, data) as server:
        after = await measure_logs(server, ids, big, repeat)
    print(
        "\n| read | p50 ms rows | p95 ms rows | p50 ms compacted | p95 ms compacted |\n"
        "|---|---|---|---|---|"
    )
    for label, samples in before.items():
        again = after[label]
        print(
            f"| {label} | {percentile(samples, 50) * 1e3:.1f} | {percentile(samples, 95) * 1e3:.1f}"
            f" | {percentile(again, 50) * 1e3:.1f} | {percentile(again, 95) * 1e3:.1f} |"
        )


def _cursor(job_id: str) -> str:
    # The fixture's created_at of a job, from its index in creation order.
    index = int(job_id.split("-")[1])
    return f"{T0 + index * 60!r}~{job_id}"


async def _first_events(server: Server, job_id: str, count: int) -> None:
    request = server._request(f"j2c/api/jobs/{job_id}/stream?after=0")
    request.url = request.url.replace("http://", "ws://")
    ws = await websocket_connect(request)
    try:
        for _ in range(count):
            if await ws.read_message() is None:
                raise RuntimeError("the stream ended early")
    finally:
        ws.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--compact", action="store_true", help="measure compaction too")
    args = parser.parse_args()
    # The fixture's jobs ended long ago: the server must not compact them under the reads.
    os.environ["J2C_REGISTRY__COMPACT_AFTER_HOURS"] = "never"
    with tempfile.TemporaryDirectory(prefix="j2c-registry-scale-") as tmp:
        data, root = Path(tmp) / "data", Path(tmp) / "root"
        data.mkdir()
        root.mkdir()
        ids, big, took = build(data, args.jobs, args.events)
        size = (data / REGISTRY_FILE).stat().st_size / 1e6
        print(
            f"fixture: {args.jobs} jobs, {args.events} events, {size:.0f} MB, built in {took:.1f} s"
        )
        if args.compact:
            await compare(data, root, ids, big, args.repeat)
            return
        async with Server(root, data) as server:
            await measure(server, ids, big, args.repeat)


if __name__ == "__main__":
    asyncio.run(main())
