"""A chaos soak: many jobs through a real Jupyter server while a seeded fault driver breaks things.

Jobs (local backend; a file:// store) of five kinds, chosen by the seed: ``ok`` (prints lines at
a varied rate, exits 0), ``fail`` (exits 3), ``cancel`` (runs long; cancelled once running),
``resend`` (sent again unchanged once submitted: must attach to the same job) and ``edit`` (its
project edited, then sent again: a new job, both succeed). Every job has viewers on its
websocket that reconnect from the last seq they saw whenever their connection ends early.

The fault driver, seeded and logged (``--seed`` replays a run), picks at random among the
kinds below, drawn as from a shuffled deck (every kind once in each round of draws, so a short
run meets each of them, however long its jobs take; the driver has its own random stream, so
the sequence of faults replays whatever the interleaving of the sends):
``server`` (``kill -9`` of the Jupyter server, restarted at once on the same port and data dir:
the restarted server adopts the jobs by their leases), ``unpack`` (``kill -9`` of a running
job's ``j2c-unpack``: that job must end failed, never succeeded), ``viewer`` (a viewer's socket
dropped; it reconnects from its last seq). With ``--store s3`` the store is a real moto S3
server behind a fault proxy (``tests/storage/fault_proxy.py``) that both the server and the
jobs' ``j2c-unpack`` go through, and the driver adds ``s3``: a burst of one to three failed
requests (503 SlowDown, 500, a connection reset) to whoever asks next.

``--backend container`` runs the jobs as podman containers of the platform image through the
``container`` backend, ``--backend slurm`` on a real Slurm through slurmrestd (the engines and
the full disk: ``soak_legs.py``); the ``unpack`` fault then kills ``j2c-unpack`` inside the
container or the Slurm step (its processes are this machine's). ``--disk-full`` puts the data
dir (registry, layer cache, ``file://`` store, runs, usage records) on a tmpfs of ``--disk-mb``
and adds ``disk_full``: a ballast file takes every free byte for ``--disk-full-s`` seconds, then
is removed. A job that was live then may fail (its own output could not be written), never
end ``lost`` or succeed falsely; a send the server refused then is sent again, as a client
would (the one-job-per-send invariant still holds).

At the end it checks and prints the invariants: every job ended in the state its history calls
for; one job per send (an unchanged re-send or a POST retried across a server kill attaches);
every viewer saw every event from seq 1 to the terminal status exactly once, in order, across
its reconnects; one usage record per job; no process left that carries a soak job's id; on S3,
no multipart upload left open; on podman, no container of this server left on the engine
(finished ones are removed once their results are read, ``keep_finished`` being off); on Slurm,
none of the soak's jobs left in the queue.

Run: ``python benchmarks/soak.py [--jobs 200 --seed 7] [--store s3] [--backend container|slurm]
[--disk-full]``; the test suite runs a short form of each leg (``tests/soak/``). Exit code 2:
this machine cannot run the leg (no podman, no Slurm, no tmpfs mount), with the reason.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # tests.storage.fault_proxy
import wsreader
from pipeline import Server
from soak_legs import ContainerLeg, DiskLeg, LegUnavailable, SlurmLeg
from tornado.httpclient import HTTPClientError

TERMINAL = {"succeeded", "failed", "cancelled", "lost"}
JOB_PY = """\
import sys, time
kind, lines, rate = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
for i in range(lines):
    print(f"line {i}", flush=True)
    time.sleep(1 / rate)
if kind == "long":
    time.sleep(120)
sys.exit(3 if kind == "fail" else 0)
"""
KINDS = ("ok", "ok", "ok", "fail", "cancel", "resend", "edit")
FAULTS = ("server", "unpack", "viewer", "viewer")
S3_FAULTS = ("s3", "s3")  # added with --store s3
DISK_FAULTS = ("disk_full",)  # added with --disk-full
S3_BURSTS = (("503",), ("reset",), ("503", "reset"), ("500", "503", "reset"))
BUCKET, PREFIX = "soak", "j2c"


class S3Leg:
    """A moto S3 server, its bucket and the fault proxy in front of it; the server's and the
    jobs' settings point at the proxy (the environment the server and its jobs inherit)."""

    def __init__(self, seed: int) -> None:
        import boto3
        from botocore.config import Config
        from moto.server import ThreadedMotoServer

        from tests.storage.fault_proxy import FaultProxy

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's line per request
        self.moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.moto.start()
        host, port = self.moto.get_host_and_port()
        os.environ.update(
            {
                "AWS_ACCESS_KEY_ID": "AKIAJ2CSOAKFAKEKEY00",
                "AWS_SECRET_ACCESS_KEY": "j2c-soak-fake-secret",
                "AWS_DEFAULT_REGION": "us-east-1",
            }
        )
        self.client = boto3.client(
            "s3",
            endpoint_url=f"http://{host}:{port}",
            config=Config(s3={"addressing_style": "path"}),
        )
        self.client.create_bucket(Bucket=BUCKET)
        self.proxy = FaultProxy(f"http://{host}:{port}", seed=seed).start()
        os.environ.update(
            {
                "J2C_STORAGE__URL": f"s3://{BUCKET}/{PREFIX}",
                "J2C_STORAGE__ENDPOINT_URL": self.proxy.url,
                "J2C_STORAGE__ADDRESSING_STYLE": "path",
                "J2C_STORAGE__REGION": "us-east-1",
            }
        )

    def keys(self, prefix: str) -> list[str]:
        pages = self.client.get_paginator("list_objects_v2")
        found = pages.paginate(Bucket=BUCKET, Prefix=f"{PREFIX}/{prefix}")
        return [item["Key"] for page in found for item in page.get("Contents", [])]

    def open_uploads(self) -> int:
        return len(self.client.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []))

    def stop(self) -> None:
        self.proxy.stop()
        self.moto.stop()


class SoakServer(Server):
    """The benchmark server, killable with SIGKILL and restartable on its port and data dir."""

    async def kill9_and_restart(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)
        await self.__aenter__()


@dataclass
class Send:
    """One logical send and what happened to it."""

    index: int
    kind: str
    body: dict[str, Any]
    ids: set[str] = field(default_factory=set)
    resend_ids: set[str] = field(default_factory=set)
    killed: set[str] = field(default_factory=set)  # jobs whose j2c-unpack got SIGKILL
    crowded: bool = False  # it was under way while the data dir was full
    done: bool = False  # every job of it ended
    cancel_asked: bool = False


class Viewer:
    """A job's websocket follower that reconnects from its last seq until the terminal event."""

    def __init__(self, server: SoakServer, job_id: str) -> None:
        self.server = server
        self.job_id = job_id
        self.seqs: list[int] = []
        self.status = ""
        self.reconnects = 0
        self.drop = asyncio.Event()
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while self.status not in TERMINAL:
            after = self.seqs[-1] if self.seqs else 0
            path = f"j2c/api/jobs/{self.job_id}/stream?after={after}"
            reading = asyncio.ensure_future(self._read(path))
            dropping = asyncio.ensure_future(self.drop.wait())
            await asyncio.wait({reading, dropping}, return_when=asyncio.FIRST_COMPLETED)
            if dropping.done():  # a fault: this connection goes away mid-read
                self.drop.clear()
                reading.cancel()
            dropping.cancel()
            with contextlib.suppress(asyncio.CancelledError, OSError, EOFError):
                await reading
            if self.status not in TERMINAL:
                self.reconnects += 1
                await asyncio.sleep(0.2)

    async def _read(self, path: str) -> None:
        async for batch in wsreader.messages(self.server.port, path, self.server.token):
            for event in map(json.loads, batch):
                self.seqs.append(event["seq"])
                if event["kind"] == "status":
                    self.status = event.get("status", "")


async def retrying(call: Any, *args: Any, refused: list[str] | None = None) -> Any:
    """A request retried while the server is down (what a client does across a restart) or
    answers 503 (the scheduler unreachable for a moment: "try again", e.g. a cancel while the
    container engine fails a stop); with ``refused``, also while it answers other 5xx (a full
    disk), each such answer noted there."""
    for _ in range(600):
        try:
            return await call(*args)
        except (OSError, ConnectionError):
            await asyncio.sleep(0.1)
        except HTTPClientError as exc:
            if exc.code in (503, 599):
                await asyncio.sleep(0.5 if exc.code == 503 else 0.1)
            elif refused is not None and exc.code >= 500:
                refused.append(f"{exc.code} {args[0]}")
                await asyncio.sleep(0.5)
            else:
                raise
    raise RuntimeError("the server did not come back")


def job_processes(job_ids: set[str]) -> dict[int, tuple[str, str]]:
    """PID → (job id, command line) of every process that carries one of ``job_ids``."""
    found: dict[int, tuple[str, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        for item in environ:
            if item.startswith(b"J2C_JOB_ID="):
                job_id = item.split(b"=", 1)[1].decode()
                if job_id in job_ids:
                    found[int(entry.name)] = (job_id, cmdline)
    return found


class Soak:
    def __init__(
        self,
        server: SoakServer,
        args: argparse.Namespace,
        s3: S3Leg | None = None,
        engine: ContainerLeg | SlurmLeg | None = None,
        disk: DiskLeg | None = None,
    ) -> None:
        self.server = server
        self.args = args
        self.s3 = s3
        self.engine = engine
        self.disk = disk
        self.fault_kinds = FAULTS + (S3_FAULTS if s3 else ()) + (DISK_FAULTS if disk else ())
        self.refused: list[str] | None = [] if disk else None  # 5xx answers while disk-full
        self.rng = random.Random(args.seed)
        self.fault_rng = random.Random(f"faults-{args.seed}")
        self.deck: list[str] = []
        self.sends: list[Send] = []
        self.viewers: list[Viewer] = []
        self.faults: list[tuple[float, str, str]] = []
        self.started = time.monotonic()
        self.ending = False
        self.evidence: dict[str, Any] = {}  # the non-log events of jobs that broke an invariant

    def log_fault(self, kind: str, target: str) -> None:
        moment = time.monotonic() - self.started
        self.faults.append((moment, kind, target))
        if self.args.verbose:
            print(f"  {moment:7.2f} s  fault {kind} {target}", flush=True)

    async def request(self, call: Any, *args: Any) -> Any:
        return await retrying(call, *args, refused=self.refused)

    async def send(self, send: Send) -> str:
        job = await self.request(self.server.post, "j2c/api/jobs", send.body)
        send.ids.add(job["id"])
        return str(job["id"])

    async def run_one(self, send: Send) -> None:
        job_id = await self.send(send)
        self.viewers.extend(Viewer(self.server, job_id) for _ in range(self.args.viewers))
        if send.kind == "resend":
            await asyncio.sleep(self.rng.uniform(0, 1))
            send.resend_ids.add(await self.send(send))
        elif send.kind == "edit":
            await asyncio.sleep(self.rng.uniform(0, 1))
            project = self.server.root / send.body["code_path"]
            with (project / "notes.txt").open("a") as notes:
                notes.write(f"edited {time.time()}\n")
            send.body = {**send.body}
            edited = await self.send(send)
            if edited != job_id:
                self.viewers.extend(Viewer(self.server, edited) for _ in range(self.args.viewers))
        elif send.kind == "cancel":
            await self.wait_running(job_id)
            send.cancel_asked = True
            await self.request(self.server.post, f"j2c/api/jobs/{job_id}/cancel", {})

    async def wait_running(self, job_id: str) -> None:
        for _ in range(1200):
            job = await self.request(self.server.get, f"j2c/api/jobs/{job_id}")
            if job["status"] in {"running", *TERMINAL}:
                return
            await asyncio.sleep(0.25)

    async def fault_driver(self) -> None:
        while not self.ending:
            await asyncio.sleep(self.fault_rng.expovariate(self.args.faults_per_min / 60))
            if self.ending:
                return
            kind = self.next_kind()
            if kind == "s3" and self.s3 is not None:
                burst = self.fault_rng.choice(S3_BURSTS)
                self.s3.proxy.queue(*burst)
                self.log_fault("s3", "+".join(burst))
            elif kind == "server":
                self.log_fault(
                    "server", f"pid {self.server.process.pid if self.server.process else '-'}"
                )
                await self.server.kill9_and_restart()
            elif kind == "viewer":
                live = [v for v in self.viewers if v.status not in TERMINAL]
                if live:
                    viewer = self.fault_rng.choice(live)
                    self.log_fault("viewer", viewer.job_id)
                    viewer.drop.set()
            elif kind == "unpack":
                self.kill_an_unpack()
            elif kind == "disk_full" and self.disk is not None:
                await self.fill_disk()

    async def fill_disk(self) -> None:
        """Every send under way now may meet the full disk (its history allows a failure)."""
        assert self.disk is not None
        live = {v.job_id for v in self.viewers if v.status not in TERMINAL}
        for send in self.sends:
            if not send.done or send.ids & live:
                send.crowded = True
        self.log_fault("disk_full", f"every free byte for {self.args.disk_full_s} s")
        await self.disk.fill(self.args.disk_full_s)

    def next_kind(self) -> str:
        if not self.deck:
            self.deck = list(self.fault_kinds)
            self.fault_rng.shuffle(self.deck)
        return self.deck.pop()

    def kill_an_unpack(self) -> None:
        by_id = {job_id: send for send in self.sends for job_id in send.ids}
        unpacks = [
            (pid, job_id)
            for pid, (job_id, cmdline) in job_processes(set(by_id)).items()
            if "j2c-unpack" in cmdline or "j2c_server.unpack" in cmdline
        ]
        if not unpacks:
            return
        pid, job_id = self.fault_rng.choice(sorted(unpacks))
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        by_id[job_id].killed.add(job_id)
        self.log_fault("unpack", job_id)

    async def run(self) -> dict[str, Any]:
        driver = asyncio.ensure_future(self.fault_driver())
        tasks = []
        for index in range(self.args.jobs):
            kind = self.rng.choice(KINDS)
            self.sends.append(self.make_send(index, kind))
            tasks.append(asyncio.ensure_future(self.run_one(self.sends[-1])))
            tasks[-1].add_done_callback(lambda _, send=self.sends[-1]: self.finished(send))
            await asyncio.sleep(self.rng.uniform(0, self.args.spread))
        await asyncio.gather(*tasks)
        await asyncio.wait_for(asyncio.gather(*(v.task for v in self.viewers)), self.args.timeout)
        self.ending = True
        driver.cancel()
        return await self.invariants()

    def finished(self, send: Send) -> None:
        """Its requests are done; it stays under way while a viewer of its jobs is."""
        send.done = True

    def make_send(self, index: int, kind: str) -> Send:
        lines = self.rng.randint(5, 60)
        rate = self.rng.choice([5.0, 20.0, 100.0])
        project = "soak" if kind != "edit" else f"soak-edit-{index}"
        folder = self.server.root / project
        if not folder.exists():
            folder.mkdir()
            (folder / "job.py").write_text(JOB_PY)
            (folder / "notes.txt").write_text("notes\n")
            old = time.time() - 3600  # settled files: the packer trusts their fingerprints
            for path in folder.iterdir():
                os.utime(path, (old, old))
        script_kind = {"fail": "fail", "cancel": "long"}.get(kind, "ok")
        body = {
            "code_path": project,
            "call_path": f"{project}/job.py",
            "args": [script_kind, str(lines), str(rate), f"send-{index}"],
        }
        return Send(index, kind, body)

    async def invariants(self) -> dict[str, Any]:
        problems: list[str] = []
        records: dict[str, dict[str, Any]] = {}
        for send in self.sends:
            for job_id in send.ids:
                records[job_id] = await retrying(self.server.get, f"j2c/api/jobs/{job_id}")
        for send in self.sends:
            found = self.check_send(send, records)
            problems += found
            for job_id in {j for j in send.ids if any(j in problem for problem in found)}:
                await self.keep_evidence(job_id, records[job_id])
        elsewhere = [j for j, r in records.items() if r.get("scheduler") != self.args.backend]
        if elsewhere:
            problems.append(f"{len(elsewhere)} jobs not on {self.args.backend}: {elsewhere[:3]}")
        for viewer in self.viewers:
            last = records[viewer.job_id]["last_seq"]
            if viewer.seqs != list(range(1, last + 1)):
                problems.append(
                    f"viewer of {viewer.job_id}: {len(viewer.seqs)} events, not 1..{last} once"
                )
        ended = sum(1 for r in records.values() if r["status"] in TERMINAL)
        # A job whose driver was killed before its usage record gets it from the next
        # service's sweep, after a grace (jobs/drive/drivers.py ACCOUNT_GRACE_S): wait for it.
        for _ in range(60):
            usage = self.usage_ids()
            missing_usage = sorted(set(records) - usage)
            if not missing_usage:
                break
            await asyncio.sleep(1)
        if missing_usage:
            problems.append(f"no usage record for {len(missing_usage)} jobs: {missing_usage[:3]}")
        await asyncio.sleep(1)  # a killed job's children are reaped by its supervisor
        left = job_processes(set(records))
        if left:
            problems.append(f"{len(left)} processes left: {list(left.values())[:3]}")
            for job_id in {job_id for job_id, _ in left.values()}:
                events = await retrying(self.server.get, f"j2c/api/jobs/{job_id}/events")
                self.evidence[job_id] = [
                    {k: e.get(k) for k in ("seq", "kind", "status", "stage", "text", "message")}
                    for e in events
                    if e["kind"] != "log"
                ]
        if self.s3 is not None and (open_uploads := self.s3.open_uploads()):
            problems.append(f"{open_uploads} multipart uploads left open in the store")
        if self.engine is not None and (held := await self.engine_leftovers(records)):
            problems.append(f"{len(held)} left on the {self.engine.name} engine: {held[:5]}")
        return {"records": records, "problems": problems, "ended": ended}

    async def engine_leftovers(self, records: dict[str, dict[str, Any]]) -> list[str]:
        """What the engine still holds of the soak's jobs, after a grace for the results stage
        of a job whose driver a server kill interrupted (the restarted server collects it)."""
        handles = {str((r.get("handle") or {}).get("id")) for r in records.values()}
        held: list[str] = []
        for _ in range(60):
            if isinstance(self.engine, ContainerLeg):
                held = await asyncio.to_thread(self.engine.leftovers)
            elif isinstance(self.engine, SlurmLeg):
                held = await asyncio.to_thread(self.engine.leftovers, handles)
            if not held:
                break
            await asyncio.sleep(1)
        return held

    async def keep_evidence(self, job_id: str, record: dict[str, Any]) -> None:
        """A job that broke an invariant: its message, non-log events and last lines."""
        events = await retrying(self.server.get, f"j2c/api/jobs/{job_id}/events")
        self.evidence[job_id] = {
            "message": record.get("message"),
            "events": [
                {k: e.get(k) for k in ("seq", "kind", "status", "stage", "message")}
                for e in events
                if e["kind"] != "log"
            ],
            "last_lines": [e.get("text") for e in events if e["kind"] == "log"][-8:],
        }

    def usage_ids(self) -> set[str]:
        if self.s3 is not None:
            return {Path(key).stem for key in self.s3.keys("usage/") if key.endswith(".json")}
        return {p.stem for p in self.server.data.rglob("usage/**/*.json")}

    @staticmethod
    def check_send(send: Send, records: dict[str, dict[str, Any]]) -> list[str]:
        problems = []
        wanted = {"fail": "failed", "cancel": "cancelled"}.get(send.kind, "succeeded")
        for job_id in send.ids:
            status = records[job_id]["status"]
            allowed = {"failed", "lost"} if job_id in send.killed else {wanted}
            if job_id in send.killed and send.kind == "cancel":
                allowed.add("cancelled")
            if send.crowded:  # its output or its pack may have met the full disk
                allowed.add("failed")
            if status not in allowed:
                problems.append(
                    f"send {send.index} ({send.kind}): {job_id} {status}, not {allowed}"
                )
            exit_code = records[job_id].get("exit_code")
            plain = job_id not in send.killed and not send.crowded
            if send.kind == "fail" and plain and exit_code != 3:
                problems.append(f"send {send.index} (fail): {job_id} exit code {exit_code}")
        wanted_ids = 2 if send.kind == "edit" else 1
        if len(send.ids) != wanted_ids:
            problems.append(
                f"send {send.index} ({send.kind}): {len(send.ids)} jobs, not {wanted_ids}"
            )
        if send.kind == "resend" and send.resend_ids - send.ids:
            problems.append(f"send {send.index}: the unchanged re-send did not attach")
        return problems


def start_legs(
    args: argparse.Namespace, tmp: Path, data: Path, legs: contextlib.ExitStack
) -> tuple[DiskLeg | None, ContainerLeg | SlurmLeg | None]:
    """The full disk and the engine the run asks for, each stopped when ``legs`` closes."""
    disk = None
    if args.disk_full:
        disk = DiskLeg(data, args.disk_mb)
        disk.mount()
        legs.callback(disk.unmount)
    engine: ContainerLeg | SlurmLeg | None = None
    if args.backend == "container":
        engine = ContainerLeg(tmp, data)
    elif args.backend == "slurm":
        engine = SlurmLeg(tmp)
    if engine is not None:
        legs.callback(engine.stop)
    return disk, engine


async def main(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="j2c-soak-") as tmp:
        root = Path(tmp) / "root"
        root.mkdir()
        data = Path(tmp) / "data"
        data.mkdir()
        with contextlib.ExitStack() as legs:
            try:
                disk, engine = start_legs(args, Path(tmp), data, legs)
            except LegUnavailable as exc:
                print(f"soak: this leg cannot run here: {exc}", file=sys.stderr)
                return 2
            s3 = S3Leg(args.seed) if args.store == "s3" else None
            server = SoakServer(root, data)
            try:
                async with server:
                    soak = Soak(server, args, s3, engine, disk)
                    result = await soak.run()
            finally:
                if s3 is not None:
                    s3.stop()
        wall = time.monotonic() - soak.started
        kinds = {kind: sum(1 for f in soak.faults if f[1] == kind) for kind in soak.fault_kinds}
        reconnects = sum(v.reconnects for v in soak.viewers)
        print(f"{'what':44} {'value':>8}  goal")
        rows = [
            ("sends", len(soak.sends), "-"),
            ("jobs", len(result["records"]), "-"),
            ("jobs ended", result["ended"], str(len(result["records"]))),
            ("viewers", len(soak.viewers), "-"),
            ("viewer reconnect attempts", reconnects, "-"),
            *((f"faults: {kind}", count, "-") for kind, count in kinds.items()),
            *(
                [(f"S3 requests failed: {k}", n, "-") for k, n in sorted(s3.proxy.injected.items())]
                if s3
                else []
            ),
            *(
                [
                    ("disk fills: MB taken, largest", max(f[0] for f in disk.fills) // 10**6, "-"),
                    ("answers 5xx while full (sent again)", len(soak.refused or ()), "-"),
                ]
                if disk and disk.fills
                else []
            ),
            ("store", args.store, "-"),
            ("backend", args.backend, "-"),
            ("invariant violations", len(result["problems"]), "0"),
            ("seed", args.seed, "-"),
            ("wall time s", round(wall), "-"),
        ]
        for what, value, goal in rows:
            print(f"{what:44} {value:>8}  {goal}")
        for problem in result["problems"][:20]:
            print(f"  violation: {problem}")
        (Path(args.report) if args.report else Path(os.devnull)).write_text(
            json.dumps(
                {
                    "problems": result["problems"],
                    "faults": soak.faults,
                    "evidence": soak.evidence,
                    "refused": soak.refused or [],
                }
            )
        )
        return 1 if result["problems"] else 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=200, help="sends")
    parser.add_argument("--viewers", type=int, default=2, help="viewers per job")
    parser.add_argument("--faults-per-min", type=float, default=12.0)
    parser.add_argument("--spread", type=float, default=0.5, help="most seconds between sends")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds for the viewers")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--store", choices=("file", "s3"), default="file", help="file:// or S3")
    parser.add_argument(
        "--backend",
        choices=("local", "container", "slurm"),
        default="local",
        help="where the jobs run: this machine, podman containers, a real Slurm",
    )
    parser.add_argument(
        "--disk-full", action="store_true", help="the data dir on a tmpfs that fills at times"
    )
    parser.add_argument("--disk-mb", type=int, default=256, help="the tmpfs's size")
    parser.add_argument("--disk-full-s", type=float, default=1.5, help="how long it stays full")
    parser.add_argument("--report", help="write the violations and faults as JSON here")
    parser.add_argument("--verbose", action="store_true", help="a line per fault")
    args = parser.parse_args(argv)
    if args.store == "s3" and args.backend != "local":
        parser.error("--store s3 runs with the local backend only (the proxy is on loopback)")
    return args


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
