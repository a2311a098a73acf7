"""The chaos soak's invariants (benchmarks/soak.py): one function, :func:`check`, over what a run
observed at its end, so the checker itself is tested against planted violations
(``tests/soak/test_soak_check_planted.py``) without a server.

What the run collects (:class:`Observed`):

- the sends as the client made them (kind, what the job prints, the ids each POST answered,
  which jobs had their ``j2c-unpack`` killed, which were under way while the disk was full);
- **every job the server lists** at the end (``GET /jobs``, paged), not only the ids the client
  was answered: a POST retried across a server kill that made a second job shows up here;
- every job's events (``GET /jobs/{id}/events``, paged) and what each viewer received;
- every usage record in the store, each one read (``usage/**.json``);
- the processes that still carry a soak job's id, and the ``/proc`` entries that could not be
  read (a reading that failed is a finding, not a skip);
- what the engines still hold, found by j2c's labels (podman) and comments (Slurm), whatever
  handle the registry recorded;
- open multipart uploads (S3), and the 5xx answers a send met while the disk was full.

What must hold (each broken one a line of :func:`check`'s answer):

- one job per send (two for an edited send), every job the server has belongs to a send, the
  ids the client was answered are among them, an unchanged re-send got the first job's id;
- each job ended as its history calls for, on the backend its send asked for; a job whose
  ``j2c-unpack`` was killed may have resumed as its next attempt (docs/pipeline.md, Attempts)
  and then end as its kind does;
- each job's log holds exactly the lines the job printed (``<tag> line <i>``): none lost, none
  doubled, in order; all of them when it ran to its end, a prefix when it was cut short. A
  resumed job's log is one such run per attempt, split at j2c's boundary lines (the soak's job
  keeps no checkpoint: each attempt prints from line 0), every attempt but the last a prefix;
- each viewer saw every event from seq 1 to the last exactly once, in order, with the text the
  server stored;
- exactly one usage record per job (counted as a multiset: a second record of a job is found),
  an end record whose status is the job's;
- no process left, no unreadable state, nothing left on the engines, no multipart upload open;
- while the disk was full, a failure is accepted only when it says the disk was full.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

TERMINAL = {"succeeded", "failed", "cancelled", "lost"}
# A line the soak's job prints: "<tag> line <i>" (tag: "send-<index>").
PRINTED = re.compile(r"^(?P<tag>send-\d+) line (?P<i>\d+)$")
# What a failure caused by the full disk says somewhere: the OS's ENOSPC, SQLite's SQLITE_FULL,
# j2c's DiskFull (server: 507 "disk_full"; j2c-unpack: exit 74).
DISK_FULL = re.compile(
    r"no space left|disk (?:of [^)]*\) )?is full|disk holding .* was full|disk_full|"
    r"database or disk is full|errno 28|"
    r"enospc|exit code 74\b",
    re.IGNORECASE,
)


@dataclass
class SendSeen:
    """One logical send, as the client made it."""

    index: int
    kind: str  # ok, fail, cancel, resend, edit
    lines: int  # how many lines its job prints ("<tag> line 0" ...)
    backend: str  # the scheduler it asked for
    answered: list[str] = field(default_factory=list)  # every id a POST of it was answered
    first_id: str | None = None  # the first POST's answer
    resend_id: str | None = None  # the unchanged re-send's answer
    edited_id: str | None = None  # the send after the edit's answer
    killed: set[str] = field(default_factory=set)  # jobs whose j2c-unpack got SIGKILL
    crowded: bool = False  # under way while the data dir was full

    @property
    def tag(self) -> str:
        return f"send-{self.index}"

    @property
    def wanted_jobs(self) -> int:
        return 2 if self.kind == "edit" else 1


@dataclass
class ViewerSeen:
    """One websocket viewer of one job: every event it received, in order."""

    job_id: str
    events: list[dict[str, Any]]  # {"seq", "kind", "text", "status"}


@dataclass
class Observed:
    """Everything the checker needs; collected by the soak at the end of a run."""

    sends: list[SendSeen]
    jobs: list[dict[str, Any]]  # every JobRecord the server lists
    events: dict[str, list[dict[str, Any]]]  # job id -> all its events
    viewers: list[ViewerSeen]
    usage: list[tuple[str, dict[str, Any]]]  # (key, record) of every usage record
    processes: list[tuple[int, str, str]]  # (pid, job id, command line) still there
    unreadable: list[str]  # state that could not be read: (what, why)
    engine_left: list[str]  # what the engines hold of this run
    open_uploads: int = 0
    refused: list[str] = field(default_factory=list)  # "<code> <path>: <body>" while full
    disk_full: bool = False  # the run had the disk-full leg


def check(seen: Observed) -> list[str]:
    """Every invariant the observations break, one line each (empty: all hold)."""
    problems: list[str] = []
    by_id = {job["id"]: job for job in seen.jobs}
    by_send = _jobs_by_send(seen, problems)
    for send in seen.sends:
        jobs = by_send.get(send.tag, [])
        problems += _one_job_per_send(send, jobs, by_id)
        for job in jobs:
            problems += _ending(send, job, seen.events.get(job["id"], []))
            problems += _log_text(send, job, seen.events.get(job["id"], []))
    problems += _viewers(seen, by_id)
    problems += _usage(seen, by_id)
    for pid, job_id, command in seen.processes:
        problems.append(f"process left: pid {pid} of {job_id} ({command[:120]})")
    problems += [f"unreadable: {what}" for what in seen.unreadable]
    problems += [f"left on the engine: {what}" for what in seen.engine_left]
    if seen.open_uploads:
        problems.append(f"{seen.open_uploads} multipart uploads left open in the store")
    problems += [
        f"an answer during the disk fill that does not say the disk is full: {answer[:200]}"
        for answer in seen.refused
        if not DISK_FULL.search(answer)
    ]
    return problems


def _send_tag(job: dict[str, Any]) -> str | None:
    return next((a for a in reversed(_args(job)) if re.fullmatch(r"send-\d+", a)), None)


def _args(job: dict[str, Any]) -> list[str]:
    return [str(a) for a in (job.get("request") or {}).get("args") or []]


def _jobs_by_send(seen: Observed, problems: list[str]) -> dict[str, list[dict[str, Any]]]:
    """The server's jobs grouped by the send they came from (the tag in their args)."""
    tags = {send.tag for send in seen.sends}
    grouped: dict[str, list[dict[str, Any]]] = {}
    for job in seen.jobs:
        tag = _send_tag(job)
        if tag not in tags:
            problems.append(f"job {job['id']} belongs to no send (args {_args(job)})")
            continue
        grouped.setdefault(tag, []).append(job)
    return grouped


def _one_job_per_send(
    send: SendSeen, jobs: list[dict[str, Any]], by_id: dict[str, dict[str, Any]]
) -> list[str]:
    problems = []
    where = f"send {send.index} ({send.kind})"
    ids = sorted(job["id"] for job in jobs)
    # A re-send whose first job was killed (its j2c-unpack) and had failed by then runs
    # again, as any re-send of a failed job does: a second job is right, not a retried POST.
    first = by_id.get(send.first_id or "", {})
    rerun = (
        send.kind == "resend"
        and send.first_id in send.killed
        and first.get("status") in ("failed", "lost")
        and send.resend_id != send.first_id
    )
    if len(jobs) != send.wanted_jobs + (1 if rerun else 0):
        problems.append(f"{where}: {len(jobs)} jobs on the server, not {send.wanted_jobs}: {ids}")
    unknown = sorted({i for i in send.answered if i not in by_id})
    if unknown:
        problems.append(f"{where}: answered ids the server does not list: {unknown}")
    if send.kind == "resend" and send.resend_id != send.first_id and not rerun:
        problems.append(
            f"{where}: the unchanged re-send got {send.resend_id}, not the first job "
            f"{send.first_id}"
        )
    if send.kind == "edit" and send.edited_id is not None and send.edited_id == send.first_id:
        problems.append(f"{where}: the send after the edit attached to {send.first_id}")
    return problems


def _says_disk_full(job: dict[str, Any], events: list[dict[str, Any]]) -> bool:
    said = [str(job.get("message") or ""), f"exit code {job.get('exit_code')}"]
    said += [str(e.get("message") or e.get("text") or "") for e in events]
    return any(DISK_FULL.search(text) for text in said)


def _ending(send: SendSeen, job: dict[str, Any], events: list[dict[str, Any]]) -> list[str]:
    """Its end as its history calls for: the kind's end; ``failed``/``lost`` once its unpack
    was killed; ``failed`` while the disk was full, only when it says the disk was full."""
    problems = []
    job_id, status = job["id"], job["status"]
    where = f"send {send.index} ({send.kind}): {job_id}"
    wanted = {"fail": "failed", "cancel": "cancelled"}.get(send.kind, "succeeded")
    killed = job_id in send.killed
    allowed = {"failed", "lost"} if killed else {wanted}
    if killed and int(job.get("attempt") or 1) > 1:
        allowed.add(wanted)  # it resumed after the kill, as an interrupted job does
    if killed and send.kind == "cancel":
        allowed.add("cancelled")
    crowded_failure = send.crowded and status == "failed" and status not in allowed
    if crowded_failure and not _says_disk_full(job, events):
        last = [str(e.get("text") or e.get("message") or "") for e in events][-3:]
        problems.append(
            f"{where} failed while the disk was full, but not for the disk (on "
            f"{job.get('scheduler')}): {str(job.get('message'))[:200]}; its last events: {last}"
        )
    elif status not in allowed and not crowded_failure:
        problems.append(f"{where} {status}, not {sorted(allowed)}")
    if send.kind == "fail" and not killed and not send.crowded and job.get("exit_code") != 3:
        problems.append(f"{where} exit code {job.get('exit_code')}, not 3")
    if job.get("scheduler") != send.backend:
        problems.append(f"{where} ran on {job.get('scheduler')}, not {send.backend}")
    return problems


def _log_text(send: SendSeen, job: dict[str, Any], events: list[dict[str, Any]]) -> list[str]:
    """The job's log against what it printed: ``<tag> line 0`` .. ``line N-1``, each once, in
    order; all N when the job ran to its end (succeeded, or failed with the exit code it chose),
    else a prefix (it was cut short)."""
    where = f"send {send.index} ({send.kind}): {job['id']}"
    attempts: list[list[int]] = [[]]
    problems = []
    for event in events:
        if event.get("kind") != "log":
            continue
        if event.get("origin") == "j2c" and event.get("phase") == "resume":
            if (event.get("data") or {}).get("attempt", {}).get("next"):
                attempts.append([])  # the next attempt prints from its first line again
            continue
        match = PRINTED.match(str(event.get("text") or ""))
        if match is None:
            continue
        if match["tag"] != send.tag:
            problems.append(f"{where}: a line of {match['tag']} in its log: {event.get('text')!r}")
            continue
        attempts[-1].append(int(match["i"]))
    for run, numbers in enumerate(attempts, start=1):
        for position, number in enumerate(numbers):
            if number != position:
                counts = Counter(numbers)
                doubled = sorted(n for n, c in counts.items() if c > 1)
                missing = sorted(set(range(max(numbers) + 1)) - set(numbers))
                of = f" of attempt {run}" if len(attempts) > 1 else ""
                problems.append(
                    f"{where}: log lines{of} out of step at position {position} (line "
                    f"{number}); doubled {doubled[:5]}, missing {missing[:5]}"
                )
                return problems  # the count below would say the same again
        if len(numbers) > send.lines:
            problems.append(f"{where}: {len(numbers)} lines in its log, it printed {send.lines}")
            return problems
    numbers = attempts[-1]
    ran_to_end = job["status"] == "succeeded" or (send.kind == "fail" and job.get("exit_code") == 3)
    if ran_to_end and len(numbers) != send.lines:
        problems.append(f"{where}: {len(numbers)} of the {send.lines} lines it printed in its log")
    return problems


def _viewers(seen: Observed, by_id: dict[str, dict[str, Any]]) -> list[str]:
    """Every event from 1 to the last, once, in order, as the server stored it."""
    problems = []
    for viewer in seen.viewers:
        job = by_id.get(viewer.job_id)
        if job is None:
            problems.append(f"viewer of {viewer.job_id}: a job the server does not list")
            continue
        last = int(job.get("last_seq") or 0)
        seqs = [int(e["seq"]) for e in viewer.events]
        if seqs != list(range(1, last + 1)):
            problems.append(f"viewer of {viewer.job_id}: {len(seqs)} events, not 1..{last} once")
            continue
        stored = {int(e["seq"]): e for e in seen.events.get(viewer.job_id, [])}
        for event in viewer.events:
            kept = stored.get(int(event["seq"]))
            if kept is None or kept.get("text") != event.get("text"):
                problems.append(
                    f"viewer of {viewer.job_id}: event {event['seq']} is not what the server "
                    f"stored ({event.get('text')!r} vs {(kept or {}).get('text')!r})"
                )
                break
    return problems


def _usage(seen: Observed, by_id: dict[str, dict[str, Any]]) -> list[str]:
    """One record per job, counted over every record read (a multiset), each an end record
    with the job's status."""
    problems = []
    counts = Counter(str(record.get("job_id")) for _, record in seen.usage)
    for job_id, count in sorted(counts.items()):
        if job_id not in by_id:
            problems.append(f"a usage record of {job_id}, a job the server does not list")
        elif count > 1:
            keys = [key for key, record in seen.usage if record.get("job_id") == job_id]
            problems.append(f"{count} usage records of job {job_id}: {keys}")
    missing = sorted(set(by_id) - set(counts))
    if missing:
        problems.append(f"no usage record of {len(missing)} jobs: {missing[:3]}")
    for key, record in seen.usage:
        job = by_id.get(str(record.get("job_id")))
        if job is None or job["status"] not in TERMINAL:
            continue
        if record.get("kind") != "end" or record.get("status") != job["status"]:
            problems.append(
                f"usage record {key}: {record.get('kind')} {record.get('status')}, the job "
                f"{job['status']}"
            )
    return problems
