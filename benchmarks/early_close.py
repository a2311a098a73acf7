"""The early close, reproduced on purpose: do stalled viewers still get the end of a job's log?

Under load a viewer (the fan-out test's tornado clients, a busy browser) falls seconds behind
the server. The server used to close a viewer's websocket once the last frames were in the
kernel's socket buffers; tornado drops the connection 5 s after its close frame, and the
viewer's next pong (to Jupyter's keep-alive ping, already queued before the job's last lines)
then reached a closed socket: the kernel reset the connection and discarded what it still
held. The viewer saw its websocket end a few events before the terminal one, without a close
frame. Here the load is made exact instead of hoped for: each viewer stalls (reads nothing at
the socket) for a random time up to ``--stall`` seconds just before its job prints its last
``--tail-kb`` and ends, and the server pings every ``--ping-ms`` (Jupyter's default is 30 s, so
only runs longer than that used to lose events).

Per run: ``--jobs`` jobs through a real Jupyter server (local scheduler), ``--viewers`` viewers
each; a viewer misses events unless it received every seq from 1 up to and including the
terminal status event, each once, in order. Viewers read with ``wsreader.py``, which answers
pings as a browser does.

Run: ``python benchmarks/early_close.py [--runs 200 --jobs 4 --viewers 15]``. The server
imports j2c from ``PYTHONPATH`` (so the commit before the fix can be measured).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import wsreader
from pipeline import Server

TERMINAL = {"succeeded", "failed", "cancelled", "lost"}
TAIL_PY = """\
import os, sys, time
go, kb = sys.argv[1], int(sys.argv[2])
print("ready", flush=True)
while not os.path.exists(go):
    time.sleep(0.02)
for i in range(kb):
    print(f"{i:06d} " + "t" * 1000)
"""


class Viewer:
    """One websocket from seq 0 to the close; stalls at the socket for ``stall`` seconds once
    its job says it is ready (the job's tail is printed during the stall)."""

    def __init__(self, server: Server, job_id: str, stall: float) -> None:
        self.server = server
        self.job_id = job_id
        self.stall = stall
        self.seqs: list[int] = []
        self.ended_by: str = "close"  # or the error that ended the connection
        self.ready = asyncio.Event()
        self.last_status = ""
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        path = f"j2c/api/jobs/{self.job_id}/stream"
        try:
            async for batch in wsreader.messages(self.server.port, path, self.server.token):
                for event in map(json.loads, batch):
                    self.seqs.append(event["seq"])
                    if event["kind"] == "status":
                        self.last_status = event.get("status", "")
                    if event["kind"] == "log" and event.get("text") == "ready":
                        self.ready.set()
                if self.ready.is_set() and self.stall:
                    stall, self.stall = self.stall, 0.0
                    await asyncio.sleep(stall)  # nothing read meanwhile: the socket fills
        except OSError as exc:  # a reset: what the early close looked like from here
            self.ended_by = type(exc).__name__
        self.ready.set()

    def complete(self, last_seq: int) -> bool:
        """Every seq up to the job's last, once, in order, the last one its terminal status."""
        return self.seqs == list(range(1, last_seq + 1)) and self.last_status in TERMINAL


async def one_run(server: Server, args: argparse.Namespace, rng: random.Random) -> list[Any]:
    go = server.root / f"go-{time.monotonic_ns()}"
    body = {
        "code_path": "ec",
        "call_path": "ec/tail.py",
        "args": [str(go), str(args.tail_kb)],
        "new": True,
    }
    jobs = await asyncio.gather(*(server.post("j2c/api/jobs", body) for _ in range(args.jobs)))
    viewers = [
        Viewer(server, job["id"], rng.uniform(0, args.stall))
        for job in jobs
        for _ in range(args.viewers)
    ]
    await asyncio.wait_for(asyncio.gather(*(v.ready.wait() for v in viewers)), 300)
    await asyncio.sleep(0.3)  # keep-alive pings queue up in the stalled sockets
    go.touch()
    await asyncio.wait_for(asyncio.gather(*(v.task for v in viewers)), 300)
    last = {job["id"]: (await server.get(f"j2c/api/jobs/{job['id']}"))["last_seq"] for job in jobs}
    return [(v, v.complete(last[v.job_id])) for v in viewers]


async def main(args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="j2c-early-close-") as tmp:
        root = Path(tmp) / "root"
        (root / "ec").mkdir(parents=True)
        (root / "ec" / "tail.py").write_text(TAIL_PY)
        old = time.time() - 3600  # a settled file: the packer trusts its fingerprint
        os.utime(root / "ec" / "tail.py", (old, old))
        data = Path(tmp) / "data"
        data.mkdir()
        config = Path(tmp) / "config"
        config.mkdir()
        settings = {"ServerApp": {"tornado_settings": {"ws_ping_interval": args.ping_ms}}}
        (config / "jupyter_server_config.json").write_text(json.dumps(settings))
        os.environ["JUPYTER_CONFIG_DIR"] = str(config)
        runs = viewers = missing = resets = 0
        start = time.monotonic()
        async with Server(root, data) as server:
            for run in range(args.runs):
                results = await one_run(server, args, rng)
                runs += 1
                viewers += len(results)
                bad = [v for v, ok in results if not ok]
                missing += len(bad)
                resets += sum(v.ended_by != "close" for v, _ in results)
                if bad or args.verbose:
                    print(
                        f"run {run + 1}: {len(bad)} of {len(results)} viewers missing events"
                        + "".join(
                            f"; {v.job_id}: {len(v.seqs)} events, last status "
                            f"{v.last_status or '-'}, ended by {v.ended_by}"
                            for v in bad[:3]
                        ),
                        flush=True,
                    )
    print(f"{'what':44} {'value':>8}  goal")
    for what, value, goal in [
        ("runs", runs, "-"),
        ("viewers", viewers, "-"),
        ("viewers missing events (up to the terminal)", missing, "0"),
        ("connections ended by a reset", resets, "0"),
        (f"stall up to {args.stall:.0f} s, pings every ms", args.ping_ms, "-"),
        ("wall time s", round(time.monotonic() - start), "-"),
    ]:
        print(f"{what:44} {value:>8}  {goal}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=4, help="jobs per run")
    parser.add_argument("--viewers", type=int, default=15, help="viewers per job")
    parser.add_argument("--stall", type=float, default=10.0, help="most seconds a viewer stalls")
    parser.add_argument("--tail-kb", type=int, default=1000, help="the job's last output, KB")
    parser.add_argument("--ping-ms", type=int, default=100, help="the server's keep-alive ping")
    parser.add_argument("--seed", type=int, default=33)
    parser.add_argument("--verbose", action="store_true", help="a line per run")
    asyncio.run(main(parser.parse_args()))
