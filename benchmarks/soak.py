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
``container`` backend, ``--backend slurm`` on a real Slurm through slurmrestd, and a list
(``--backend local,container,slurm``) runs them on each in turn, send by send, through one
server (the engines, the S3 store and the full disk: ``soak_legs.py``); the ``unpack`` fault then
kills ``j2c-unpack`` inside the container or the Slurm step (its processes are this machine's).
``--disk-full`` puts the data dir (registry, layer cache, ``file://`` store, runs, usage
records) on a tmpfs of ``--disk-mb`` and adds ``disk_full``: a ballast file takes every free
byte for ``--disk-full-s`` seconds, then is removed. A job that was live then may fail, saying
the disk was full, never end ``lost`` or succeed falsely; a send the server refused then is sent
again, as a client would (the one-job-per-send invariant still holds), and the refusal must say
the disk was full. ``--server-kills N`` adds a server kill after every ``jobs/N`` sends to
those drawn, so a run meets at least N. ``--all-legs`` is every leg at once: the three backends,
the S3 store, the full disk and at least 10 server kills.

At the end it lists every job the server has (not only those the client was answered) and checks
the invariants over what it collected (``soak_check.py``, tested against planted violations):
every job ended in the state its history calls for; one job per send (an unchanged re-send or a
POST retried across a server kill attaches); each job's log holds exactly the lines it printed,
once each and in order; every viewer saw every event from seq 1 to the terminal status exactly
once, in order, across its reconnects; one usage record per job (counted as a multiset); no
process left that carries a soak job's id, and no process whose state could not be read; on S3,
no multipart upload left open; on the engines, nothing that j2c's labels (podman) or comments
(Slurm) tie to the server's jobs, however the registry recorded their handles.

Run: ``python benchmarks/soak.py [--jobs 200 --seed 7] [--store s3]
[--backend local,container,slurm] [--disk-full] [--server-kills N] [--all-legs]``; the test
suite runs a short form of each leg (``tests/soak/``). Exit code 2: this machine cannot run
the leg (no podman, no Slurm, no tmpfs mount), with the reason.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # tests.storage.fault_proxy
import wsreader
from pipeline import Server
from soak_check import TERMINAL, Observed, SendSeen, ViewerSeen, check
from soak_legs import ContainerLeg, DiskLeg, LegUnavailable, S3Leg, SlurmLeg
from tornado.httpclient import HTTPClientError

JOB_PY = """\
import sys, time
kind, lines, rate, tag = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
for i in range(lines):
    print(f"{tag} line {i}", flush=True)
    time.sleep(1 / rate)
if kind == "long":
    time.sleep(120)
sys.exit(3 if kind == "fail" else 0)
"""
KINDS = ("ok", "ok", "ok", "fail", "cancel", "resend", "edit")
BACKENDS = ("local", "container", "slurm")
FAULTS = ("server", "unpack", "viewer", "viewer")
S3_FAULTS = ("s3", "s3")  # added with --store s3
DISK_FAULTS = ("disk_full",)  # added with --disk-full
S3_BURSTS = (("503",), ("reset",), ("503", "reset"), ("500", "503", "reset"))
PAGE = 1000  # jobs per page of GET /jobs, events per page of GET /jobs/{id}/events


class SoakServer(Server):
    """The benchmark server, killable with SIGKILL and restartable on its port and data dir."""

    async def kill9_and_restart(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)
        await self.__aenter__()


@dataclass
class Send(SendSeen):
    """One logical send: what the checker sees of it, and what the run needs to make it."""

    body: dict[str, Any] = field(default_factory=dict)
    done: bool = False  # its requests are done


class Viewer:
    """A job's websocket follower that reconnects from its last seq until the terminal event."""

    def __init__(self, server: SoakServer, job_id: str) -> None:
        self.server = server
        self.job_id = job_id
        self.events: list[dict[str, Any]] = []
        self.status = ""
        self.reconnects = 0
        self.drop = asyncio.Event()
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while self.status not in TERMINAL:
            after = self.events[-1]["seq"] if self.events else 0
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
                self.events.append({k: event.get(k) for k in ("seq", "kind", "text", "status")})
                if event["kind"] == "status":
                    self.status = event.get("status", "")


def answer_text(exc: HTTPClientError) -> str:
    body = exc.response.body if exc.response is not None and exc.response.body else b""
    return body.decode(errors="replace")[:300]


async def retrying(call: Any, *args: Any, refused: list[str] | None = None) -> Any:
    """A request retried while the server is down (what a client does across a restart) or
    answers 503 (the scheduler unreachable for a moment: "try again", e.g. a cancel while the
    container engine fails a stop); with ``refused``, also while it answers other 5xx (a full
    disk), each such answer noted there with what it said."""
    for _ in range(600):
        try:
            return await call(*args)
        except (OSError, ConnectionError):
            await asyncio.sleep(0.1)
        except HTTPClientError as exc:
            if exc.code in (503, 599):
                await asyncio.sleep(0.5 if exc.code == 503 else 0.1)
            elif refused is not None and exc.code >= 500:
                refused.append(f"{exc.code} {args[0]}: {answer_text(exc)}")
                await asyncio.sleep(0.5)
            else:
                raise
    raise RuntimeError("the server did not come back")


PF_KTHREAD = 0x00200000  # /proc/<pid>/stat's flags: a kernel thread (no environment of its own)


def _stat_fields(entry: Path) -> list[str]:
    """``/proc/<pid>/stat``'s fields after the command name (which may hold spaces): [0] is
    the state, [6] the flags, [19] the start time in clock ticks since boot."""
    return entry.joinpath("stat").read_text().rsplit(")", 1)[1].split()


def job_processes(job_ids: set[str]) -> tuple[list[tuple[int, str, str]], list[str]]:
    """(pid, job id, command line) of every process that carries one of ``job_ids`` in its
    environment, and the processes whose environment could not be read although they could
    carry one. A process that ended while it was read is no finding; nor is a kernel thread,
    or a process older than this one (it was started before any soak job, and a job's id
    reaches a process only through the environment it was started with); any other process
    that cannot be read is one: nothing is skipped unseen."""
    found: list[tuple[int, str, str]] = []
    unreadable: list[str] = []
    born = int(_stat_fields(Path("/proc/self"))[19])
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (FileNotFoundError, ProcessLookupError):
            continue  # it ended between the listing and the read
        except OSError as exc:
            try:
                fields = _stat_fields(entry)
            except (FileNotFoundError, ProcessLookupError):
                continue
            except OSError as stat_exc:
                unreadable.append(f"/proc/{entry.name}: {exc}; its stat: {stat_exc}")
                continue
            if int(fields[6]) & PF_KTHREAD or int(fields[19]) < born:
                continue
            unreadable.append(f"/proc/{entry.name} (started after the soak): {exc}")
            continue
        for item in environ:
            if item.startswith(b"J2C_JOB_ID="):
                job_id = item.split(b"=", 1)[1].decode()
                if job_id in job_ids:
                    found.append((int(entry.name), job_id, cmdline))
    return found, unreadable


class Soak:
    def __init__(
        self,
        server: SoakServer,
        args: argparse.Namespace,
        s3: S3Leg | None = None,
        engines: dict[str, ContainerLeg | SlurmLeg] | None = None,
        disk: DiskLeg | None = None,
    ) -> None:
        self.server = server
        self.args = args
        self.s3 = s3
        self.engines = engines or {}
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
        self.server_lock = asyncio.Lock()  # one kill and restart at a time
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
        send.answered.append(str(job["id"]))
        return str(job["id"])

    def watch(self, job_id: str) -> None:
        self.viewers.extend(Viewer(self.server, job_id) for _ in range(self.args.viewers))

    async def run_one(self, send: Send) -> None:
        send.first_id = job_id = await self.send(send)
        self.watch(job_id)
        if send.kind == "resend":
            await asyncio.sleep(self.rng.uniform(0, 1))
            send.resend_id = await self.send(send)
        elif send.kind == "edit":
            await asyncio.sleep(self.rng.uniform(0, 1))
            project = self.server.root / send.body["code_path"]
            with (project / "notes.txt").open("a") as notes:
                notes.write(f"edited {time.time()}\n")
            send.edited_id = await self.send(send)
            if send.edited_id != job_id:
                self.watch(send.edited_id)
        elif send.kind == "cancel":
            await self.wait_running(job_id)
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
                await self.kill_server("drawn")
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

    async def kill_server(self, why: str) -> None:
        """``kill -9`` of the server, restarted at once on its port and data dir."""
        async with self.server_lock:
            pid = self.server.process.pid if self.server.process else "-"
            self.log_fault("server", f"pid {pid} ({why})")
            await self.server.kill9_and_restart()

    async def fill_disk(self) -> None:
        """Every send under way now may meet the full disk (its history allows a failure that
        says so)."""
        assert self.disk is not None
        live = {v.job_id for v in self.viewers if v.status not in TERMINAL}
        for send in self.sends:
            if not send.done or set(send.answered) & live:
                send.crowded = True
        self.log_fault("disk_full", f"every free byte for {self.args.disk_full_s} s")
        await self.disk.fill(self.args.disk_full_s)

    def next_kind(self) -> str:
        if not self.deck:
            self.deck = list(self.fault_kinds)
            self.fault_rng.shuffle(self.deck)
        return self.deck.pop()

    def kill_an_unpack(self) -> None:
        by_id = {job_id: send for send in self.sends for job_id in send.answered}
        unpacks = [
            (pid, job_id)
            for pid, job_id, cmdline in job_processes(set(by_id))[0]
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
        # --server-kills N: besides the drawn ones, a kill after every jobs/N sends, so a run
        # meets at least N however short its jobs are.
        every = max(1, self.args.jobs // self.args.server_kills) if self.args.server_kills else 0
        for index in range(self.args.jobs):
            kind = self.rng.choice(KINDS)
            self.sends.append(self.make_send(index, kind))
            tasks.append(asyncio.ensure_future(self.run_one(self.sends[-1])))
            tasks[-1].add_done_callback(lambda _, send=self.sends[-1]: self.finished(send))
            await asyncio.sleep(self.rng.uniform(0, self.args.spread))
            if every and (index + 1) % every == 0:
                await self.kill_server(f"after send {index}")
        await asyncio.gather(*tasks)
        await asyncio.wait_for(asyncio.gather(*(v.task for v in self.viewers)), self.args.timeout)
        self.ending = True
        driver.cancel()
        observed = await self.observe()
        problems = check(observed)
        self.keep_evidence(observed, problems)
        ended = sum(1 for job in observed.jobs if job["status"] in TERMINAL)
        return {"jobs": observed.jobs, "problems": problems, "ended": ended}

    def finished(self, send: Send) -> None:
        """Its requests are done; it stays under way while a viewer of its jobs is."""
        send.done = True

    def make_send(self, index: int, kind: str) -> Send:
        lines = self.rng.randint(5, 60)
        rate = self.rng.choice([5.0, 20.0, 100.0])
        backend = self.args.backends[index % len(self.args.backends)]
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
            "scheduler": backend,
        }
        return Send(index, kind, lines, backend, body=body)

    # What the run left, collected for the checker (soak_check.py).

    async def observe(self) -> Observed:
        jobs = await self.settled_jobs()
        events = {job["id"]: await self.all_events(job["id"]) for job in jobs}
        ids = {job["id"] for job in jobs}
        usage = await self.usage_records(ids)
        await asyncio.sleep(1)  # a killed job's children are reaped by its supervisor
        processes, unreadable = job_processes(ids)
        return Observed(
            sends=list(self.sends),
            jobs=jobs,
            events=events,
            viewers=[ViewerSeen(v.job_id, v.events) for v in self.viewers],
            usage=usage,
            processes=processes,
            unreadable=unreadable,
            engine_left=await self.engine_leftovers(ids),
            open_uploads=self.s3.open_uploads() if self.s3 is not None else 0,
            refused=list(self.refused or ()),
            disk_full=self.disk is not None,
        )

    async def list_jobs(self) -> list[dict[str, Any]]:
        """Every job the server has (``GET /jobs``, page after page), whoever saw it."""
        jobs: list[dict[str, Any]] = []
        cursor = ""
        while True:
            path = f"j2c/api/jobs?limit={PAGE}" + (f"&before={quote(cursor)}" if cursor else "")
            page = await retrying(self.server.get, path)
            jobs.extend(page)
            if len(page) < PAGE:
                return jobs
            cursor = f"{page[-1]['created_at']!r}~{page[-1]['id']}"

    async def settled_jobs(self) -> list[dict[str, Any]]:
        """Every job, once each has ended (a job no viewer follows, e.g. a second job of a
        retried POST, is waited for too), or after ``--timeout`` as they are."""
        deadline = time.monotonic() + self.args.timeout
        while True:
            jobs = await self.list_jobs()
            if all(job["status"] in TERMINAL for job in jobs) or time.monotonic() > deadline:
                return jobs
            await asyncio.sleep(1)

    async def all_events(self, job_id: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        while True:
            after = events[-1]["seq"] if events else 0
            path = f"j2c/api/jobs/{job_id}/events?after={after}&limit={PAGE}"
            page = await retrying(self.server.get, path)
            events.extend(page)
            if len(page) < PAGE:
                return events

    async def usage_records(self, ids: set[str]) -> list[tuple[str, dict[str, Any]]]:
        """Every usage record in the store, read, once each job's is an end record. A job is
        terminal before its end record is written (a store that fails makes the write retry
        for seconds), and a job whose driver was killed before that gets it from the next
        service's sweep, after a grace (jobs/drive/drivers.py ACCOUNT_GRACE_S): waited for,
        up to a minute; what is there then is checked."""
        records: list[tuple[str, dict[str, Any]]] = []
        for _ in range(60):
            records = await asyncio.to_thread(self.read_usage)
            ended = {
                str(record.get("job_id")) for _, record in records if record.get("kind") == "end"
            }
            if ids <= ended:
                break
            await asyncio.sleep(1)
        return records

    def read_usage(self) -> list[tuple[str, dict[str, Any]]]:
        if self.s3 is not None:
            keys = [key for key in self.s3.keys("usage/") if key.endswith(".json")]
            return [(key, json.loads(self.s3.read(key))) for key in keys]
        found = sorted(self.server.data.rglob("usage/**/*.json"))
        return [
            (str(path.relative_to(self.server.data)), json.loads(path.read_text()))
            for path in found
        ]

    async def engine_leftovers(self, ids: set[str]) -> list[str]:
        """What the engines still hold of the server's jobs (by j2c's labels and comments),
        after a grace for the results stage of a job whose driver a server kill interrupted
        (the restarted server collects it)."""
        held: list[str] = []
        for _ in range(60):
            held = []
            for engine in self.engines.values():
                held += await asyncio.to_thread(engine.leftovers, ids)
            if not held:
                break
            await asyncio.sleep(1)
        return held

    def keep_evidence(self, observed: Observed, problems: list[str]) -> None:
        """A job that broke an invariant: its message, non-log events and last lines."""
        for job in observed.jobs:
            if not any(job["id"] in problem for problem in problems):
                continue
            events = observed.events.get(job["id"], [])
            self.evidence[job["id"]] = {
                "scheduler": job.get("scheduler"),
                "exit_code": job.get("exit_code"),
                "message": job.get("message"),
                "events": [
                    {k: e.get(k) for k in ("seq", "kind", "status", "stage", "message")}
                    for e in events
                    if e["kind"] != "log"
                ],
                "last_lines": [e.get("text") for e in events if e["kind"] == "log"][-8:],
            }


def start_legs(
    args: argparse.Namespace, tmp: Path, data: Path, legs: contextlib.ExitStack
) -> tuple[DiskLeg | None, dict[str, ContainerLeg | SlurmLeg], S3Leg | None]:
    """The full disk, the engines and the store the run asks for, each stopped when ``legs``
    closes."""
    disk = None
    if args.disk_full:
        disk = DiskLeg(data, args.disk_mb)
        disk.mount()
        legs.callback(disk.unmount)
    engines: dict[str, ContainerLeg | SlurmLeg] = {}
    if "container" in args.backends:
        engines["container"] = ContainerLeg(tmp, data)
        legs.callback(engines["container"].stop)
    if "slurm" in args.backends:
        engines["slurm"] = SlurmLeg(tmp)
        legs.callback(engines["slurm"].stop)
    s3 = None
    if args.store == "s3":
        s3 = S3Leg(args.seed, engines=frozenset(engines))
        legs.callback(s3.stop)
    return disk, engines, s3


async def main(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="j2c-soak-") as tmp:
        # Others may pass through (not list): slurmrestd runs as user slurm and reads its
        # config below, and container jobs run as uid 1000.
        os.chmod(tmp, 0o711)
        root = Path(tmp) / "root"
        root.mkdir()
        data = Path(tmp) / "data"
        data.mkdir()
        with contextlib.ExitStack() as legs:
            try:
                disk, engines, s3 = start_legs(args, Path(tmp), data, legs)
            except LegUnavailable as exc:
                print(f"soak: this leg cannot run here: {exc}", file=sys.stderr)
                return 2
            server = SoakServer(root, data)
            async with server:
                soak = Soak(server, args, s3, engines, disk)
                result = await soak.run()
            injected = sorted(s3.proxy.injected.items()) if s3 else []
            container = engines.get("container")
            probes = container.sweep_probes() if isinstance(container, ContainerLeg) else 0
        wall = time.monotonic() - soak.started
        kinds = {kind: sum(1 for f in soak.faults if f[1] == kind) for kind in soak.fault_kinds}
        reconnects = sum(v.reconnects for v in soak.viewers)
        per_backend = {
            backend: sum(1 for job in result["jobs"] if job.get("scheduler") == backend)
            for backend in args.backends
        }
        print(f"{'what':44} {'value':>8}  goal")
        rows = [
            ("sends", len(soak.sends), "-"),
            ("jobs (every job the server lists)", len(result["jobs"]), "-"),
            *((f"  on {backend}", n, "-") for backend, n in per_backend.items()),
            ("jobs ended", result["ended"], str(len(result["jobs"]))),
            ("viewers", len(soak.viewers), "-"),
            ("viewer reconnect attempts", reconnects, "-"),
            *((f"faults: {kind}", count, "-") for kind, count in kinds.items()),
            *((f"S3 requests failed: {k}", n, "-") for k, n in injected),
            *(
                [
                    ("disk fills: MB taken, largest", max(f[0] for f in disk.fills) // 10**6, "-"),
                    ("answers 5xx while full (sent again)", len(soak.refused or ()), "-"),
                ]
                if disk and disk.fills
                else []
            ),
            *(
                [("image probes killed servers left (removed)", probes, "-")]
                if "container" in engines
                else []
            ),
            ("store", args.store, "-"),
            ("backends", ",".join(args.backends), "-"),
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
                    "jobs_per_backend": per_backend,
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
        default="local",
        help="where the jobs run, one or several (comma-separated, sends take turns): "
        "local (this machine), container (podman), slurm (a real Slurm)",
    )
    parser.add_argument(
        "--disk-full", action="store_true", help="the data dir on a tmpfs that fills at times"
    )
    parser.add_argument(
        "--all-legs",
        action="store_true",
        help="every leg in one run: --backend local,container,slurm --store s3 --disk-full, "
        "and at least 10 server kills",
    )
    parser.add_argument(
        "--server-kills",
        type=int,
        default=0,
        help="at least this many server kills: one after every jobs/N sends, besides those drawn",
    )
    parser.add_argument("--disk-mb", type=int, default=256, help="the tmpfs's size")
    parser.add_argument("--disk-full-s", type=float, default=1.5, help="how long it stays full")
    parser.add_argument("--report", help="write the violations and faults as JSON here")
    parser.add_argument("--verbose", action="store_true", help="a line per fault")
    args = parser.parse_args(argv)
    if args.all_legs:
        args.backend, args.store, args.disk_full = ",".join(BACKENDS), "s3", True
        args.server_kills = max(args.server_kills, 10)
    args.backends = [b.strip() for b in args.backend.split(",") if b.strip()]
    unknown = sorted(set(args.backends) - set(BACKENDS))
    if unknown or not args.backends:
        parser.error(f"--backend: {unknown or 'none'} not among {', '.join(BACKENDS)}")
    return args


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
