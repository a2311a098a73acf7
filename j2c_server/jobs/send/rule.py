"""The send rule, in one place for every front end: attach to an earlier job or make a new one.

A job's identity is its request *and* the content it ships. A send attaches to a job only when
both are unchanged (and that job is still going or succeeded): that is "re-run the command to
check on the job". An edited, added or removed file, or a changed setting, makes a new job; its
layers that did not change are reused by the pipeline. The decision is explained in words
("2 files changed since job X: sending a new job") and in data (:class:`SendDecision`).
"""

from __future__ import annotations

import hashlib
import json

from j2c_server.core.units import count
from j2c_server.pack.changes import ScanReport
from j2c_server.wire.api import JobRecord, JobRequest, JobStatus, SendDecision

# Request fields that say how a send is run, not what it is: they never split a job.
_NOT_SETTINGS = {"new"}
# Request fields that came after the first jobs: a request leaving them unset keeps its key.
_LATER_FIELDS = ("sweep", "max_attempts", "checkpoint_dirs")
# The jobs a send with the same key attaches to: still going, or done successfully.
ATTACHABLE = frozenset(s for s in JobStatus if not s.terminal or s == JobStatus.succeeded)


def attach_to(request: JobRequest) -> frozenset[JobStatus]:
    """The statuses of a job with this send's key that it attaches to; none when the request
    asks for a new run (``new``). The registry looks the job up in the same transaction that
    would create the new one (``registry.jobs.create_or_attach``)."""
    return frozenset() if request.new else ATTACHABLE


def request_key(request: JobRequest) -> str:
    """Identical (resolved) requests share a key; ``new`` only decides whether they attach.

    A sweep's spec is part of its key (an unchanged re-send of the sweep attaches to its parent);
    a request without one hashes as before sweeps existed, so earlier jobs still attach (the same
    for a job's own resume settings, ``max_attempts`` and ``checkpoint_dirs``).
    """
    # Fields added later hash only when set, so earlier jobs still attach.
    unset = {name for name in _LATER_FIELDS if getattr(request, name) is None}
    body = request.model_dump_json(exclude=_NOT_SETTINGS | unset)
    return hashlib.sha256(body.encode()).hexdigest()[:32]


def job_key(settings_key: str, content: dict[str, str]) -> str:
    """The key a send attaches by: its settings and its layers' content fingerprints."""
    body = json.dumps({"request": settings_key, "content": content}, sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()[:32]


def changed_settings(before: JobRequest, after: JobRequest) -> list[str]:
    old = before.model_dump(mode="json", exclude=_NOT_SETTINGS)
    new = after.model_dump(mode="json", exclude=_NOT_SETTINGS)
    return sorted(name for name in new if old.get(name) != new[name])


def attached(record: JobRecord) -> SendDecision:
    """The send found ``record`` running (or succeeded) with the same request and content."""
    return SendDecision(
        attached=True,
        previous_job=record.id,
        message=f"nothing changed since job {record.id} ({record.status.value}): showing it",
    )


def new_job(request: JobRequest, scan: ScanReport, earlier: JobRecord | None) -> SendDecision:
    """Why this send makes a new job, compared with ``earlier`` (the latest job with the same
    settings, else the project's latest)."""
    if earlier is None:
        return SendDecision(attached=False, message="first send of this project: sending a new job")
    settings = changed_settings(earlier.request, request)
    parts: list[str] = []
    if scan.changed_files:
        parts.append(f"{count(scan.changed_files, 'file')} changed")
    elif scan.content != earlier.content and not scan.compared:
        parts.append("the project's files changed")
    if settings:
        parts.append(f"settings changed ({', '.join(settings)})")
    if parts:
        reason = f"{' and '.join(parts)} since job {earlier.id}"
    elif request.new:
        reason = f"a new run of job {earlier.id} was asked for"
    elif earlier.status in (JobStatus.succeeded,) or not earlier.status.terminal:
        # Same settings and content but not attached: that job is of an older j2c (no content
        # recorded), or was removed meanwhile.
        reason = f"job {earlier.id} could not be matched"
    else:
        reason = f"nothing changed since job {earlier.id}, which {earlier.status.value}"
    return SendDecision(
        attached=False,
        previous_job=earlier.id,
        changed_files=scan.changed_files,
        changes=scan.changes,
        changed_settings=settings,
        message=f"{reason}: sending a new job",
    )
