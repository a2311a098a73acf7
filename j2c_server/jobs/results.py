"""The results stage's outputs, for every backend: what ``j2c-unpack`` uploaded, read from the
store's outputs index once it is proved to be the job's own, merged with what the scheduler
itself returns.

``j2c-unpack --output-uri <store>/jobs/<id>/outputs`` writes ``.j2c-outputs.json`` there at each
sync and after the run (also after a failed one): each uploaded file's name, size and sha256,
the files it could not upload, the ones it left out by rule (a cap, a secret) and why. It prints
the index's sha256 in the job's log (``j2c: outputs: index sha256:<hex>``), which reaches the
server through the scheduler: the trust anchor. Anyone who may write the bucket could replace
the index and the files under it; nobody but the job writes its log. So the stored index is
used only when its bytes hash to the last digest the log holds; otherwise its files are not
listed and ``outputs_note`` says why. A trusted index is the listing, served from the store (its
sha256s are what ``artifacts.py`` checks every download and copy against). Without one, a
scheduler that keeps the job's outputs folder on this machine (local, container) returns that
folder's listing, which stays the record's (no digests); Slurm and Kubernetes then list none.
``outputs_note`` also says when there are no outputs, what was left out or not uploaded, when
the job was stopped before its last sync, and when a presigned job could upload nothing.

A multi-node job's rank ``k > 0`` uploads under ``rank-<k>/`` with its own index, trusted by
its own logged digest the same way (``index of rank <k> sha256:``). Its files are listed as
``rank-<k>/<name>`` except those identical to rank 0's (same name, same sha256): listed once,
as rank 0's. ``outputs_note`` says which ranks returned what (docs/results.md).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from pathlib import PurePosixPath

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from j2c_server.core.errors import StorageError
from j2c_server.storage import ObjectStore
from j2c_server.storage.errors import ObjectNotFound
from j2c_server.unpack.outputs import (
    INDEX_DIGEST_MARK as INDEX_DIGEST_MARK,  # the pipeline's search
)
from j2c_server.unpack.outputs import INDEX_NAME, rank_folder
from j2c_server.unpack.outputs import digest_mark as digest_mark  # the pipeline's search
from j2c_server.wire.api import Artifact, JobRecord, JobResults, OutputFailure

log = logging.getLogger(__name__)

MAX_ARTIFACTS = 1000
_UPLOAD_STAGE = "uploading outputs"
# j2c-unpack's own done line of that stage ("3 files in the outputs, 1 uploaded now ...").
_PROGRESS_LINE = re.compile(r"\d+ files in the outputs")
_LOGGED_DIGEST = re.compile(re.escape(INDEX_DIGEST_MARK) + r"([0-9a-f]{64})\b")
PRESIGNED_NOTE = (
    "outputs need store access: the store signed no upload policy for this presigned job, so the "
    "files it writes in its working copy do not come back"
)


class IndexedFile(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str
    size: int
    sha256: str


class LeftOut(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str
    size: int
    reason: str


class IndexedCheckpoint(BaseModel):
    """One checkpoint the store holds whole (unpack/checkpoints.py): a file or folder of a
    checkpoint folder, named relative to the code folder as outputs are."""

    model_config = ConfigDict(extra="ignore")

    entry: str
    folder: str
    saved_at: float
    files: list[str] = Field(default_factory=list)


class OutputsIndex(BaseModel):
    """``.j2c-outputs.json`` as ``j2c_server.unpack.outputs`` writes it."""

    model_config = ConfigDict(extra="ignore")

    format: int = 1
    final: bool = True
    files: list[IndexedFile] = Field(default_factory=list)
    failed: list[OutputFailure] = Field(default_factory=list)
    left_out: list[LeftOut] = Field(default_factory=list)
    checkpoints: list[IndexedCheckpoint] = Field(
        default_factory=list, description="Newest first: what a resumed attempt restores."
    )


def outputs_prefix(job_id: str) -> str:
    return f"jobs/{job_id}/outputs"


def logged_digest(lines: list[str], rank: int = 0) -> str | None:
    """The last outputs index sha256 the job (its rank ``rank``) printed among ``lines``."""
    pattern = (
        _LOGGED_DIGEST
        if rank == 0
        else re.compile(re.escape(digest_mark(rank)) + r"([0-9a-f]{64})\b")
    )
    for line in reversed(lines):
        found = pattern.search(line)
        if found:
            return found.group(1)
    return None


async def read_index(
    store: ObjectStore, job_id: str, digest: str | None, rank: int = 0
) -> tuple[OutputsIndex | None, str | None]:
    """The job's outputs index (rank ``rank``'s) when its sha256 is ``digest`` (the one its log
    holds), or None and why not (None, None: there is none)."""
    folder = f"{rank_folder(rank)}/" if rank else ""
    key = f"{outputs_prefix(job_id)}/{folder}{INDEX_NAME}"
    try:
        raw = await store.get_bytes(key)
    except ObjectNotFound:
        return None, None
    except StorageError as exc:
        return None, f"the outputs index {store.uri(key)} could not be read: {exc.message}"
    if digest is None:
        return None, (
            f"the outputs index {store.uri(key)} is not listed: the job's log does not hold its "
            f"sha256 ('{digest_mark(rank)}'), so it cannot be told from one written by someone else"
        )
    actual = hashlib.sha256(raw).hexdigest()
    if actual != digest:
        log.warning("job %s: outputs index sha256 %s, the job logged %s", job_id, actual, digest)
        return None, (
            f"the outputs index {store.uri(key)} is not listed: its sha256 {actual[:12]}... is "
            f"not the {digest[:12]}... the job logged (changed in the store after the job wrote "
            "it)"
        )
    try:
        return OutputsIndex.model_validate(json.loads(raw)), None
    except (ValueError, ValidationError) as exc:
        return None, f"the outputs index {store.uri(key)} is not valid: {str(exc)[:200]}"


async def collect_outputs(
    store: ObjectStore,
    record: JobRecord,
    results: JobResults,
    *,
    uploaded: bool,
    last_lines: list[str],
    digest_lines: list[str] | None = None,
    rank_lines: dict[int, str | None] | None = None,
) -> JobResults:
    """``results`` (the scheduler's) with the outputs the store's index lists. ``uploaded``:
    whether the job was told to upload its outputs (not with presigned URLs); ``last_lines``:
    the job's last log lines, where ``j2c-unpack`` says why an upload failed; ``digest_lines``:
    where the index's sha256 is read: the pipeline's is j2c's last line with it (anywhere in
    the log, never a line of the job's own output); None: ``last_lines`` (a caller with only
    the log's text); ``rank_lines``: of a multi-node job, each rank k > 0's last line with its
    own index's sha256."""
    digest = logged_digest(last_lines if digest_lines is None else digest_lines)
    index, problem = await read_index(store, record.id, digest) if uploaded else (None, None)
    artifacts = list(results.artifacts)
    output_uri = results.output_uri
    notebook = results.executed_notebook
    if index is not None:
        prefix = outputs_prefix(record.id)
        output_uri = store.uri(prefix)
        artifacts = [
            Artifact(
                name=item.name,
                size=item.size,
                url=store.uri(f"{prefix}/{item.name}"),
                sha256=item.sha256,
            )
            for item in index.files[:MAX_ARTIFACTS]
        ]
        if notebook is not None:  # the scheduler's copy: the store's is the listed one
            notebook = None
    if notebook is None:
        notebook = _executed_notebook(artifacts, record.request.call_path)
    failed = list(index.failed) if index is not None else []
    left_out = [
        OutputFailure(name=item.name, error=item.reason)
        for item in (index.left_out if index is not None else [])
    ]
    ranks_note = None
    if uploaded and rank_lines:
        ranks_note = await _merge_ranks(
            store, record.id, index, rank_lines, artifacts, failed, left_out
        )
    notes = [
        _note(artifacts, failed, index, problem, uploaded=uploaded, last_lines=last_lines),
        _left_out_note(left_out),
        None if index is None or index.final else _STOPPED_NOTE,
        None if uploaded else PRESIGNED_NOTE,
        ranks_note,
    ]
    return results.model_copy(
        update={
            "artifacts": artifacts,
            "output_uri": output_uri,
            "executed_notebook": notebook,
            "failed_outputs": failed,
            "left_out_outputs": left_out,
            "outputs_note": "; ".join(note for note in notes if note) or None,
        }
    )


async def _merge_ranks(
    store: ObjectStore,
    job_id: str,
    index: OutputsIndex | None,
    rank_lines: dict[int, str | None],
    artifacts: list[Artifact],
    failed: list[OutputFailure],
    left_out: list[OutputFailure],
) -> str:
    """Add every rank k > 0's outputs to the lists (in place) under ``rank-<k>/``; the note
    that says which rank returned what."""
    if index is None:  # the artifacts are served from the listing's own location then
        return "the other ranks' outputs are listed only with rank 0's outputs index"
    prefix = outputs_prefix(job_id)
    rank0 = {item.name: item.sha256 for item in index.files}
    said = [f"rank 0: {len(rank0)} files"]
    for rank, line in sorted(rank_lines.items()):
        digest = logged_digest([line] if line else [], rank)
        found, problem = await read_index(store, job_id, digest, rank)
        folder = rank_folder(rank)
        if found is None:
            said.append(f"rank {rank}: {problem or 'no outputs index'}")
            continue
        same = 0
        for item in found.files:
            if rank0.get(item.name) == item.sha256:
                same += 1  # identical to rank 0's: listed once, as rank 0's
            elif len(artifacts) < MAX_ARTIFACTS:
                artifacts.append(
                    Artifact(
                        name=f"{folder}/{item.name}",
                        size=item.size,
                        url=store.uri(f"{prefix}/{folder}/{item.name}"),
                        sha256=item.sha256,
                    )
                )
        failed += [
            OutputFailure(name=f"{folder}/{item.name}", error=item.error) for item in found.failed
        ]
        left_out += [
            OutputFailure(name=f"{folder}/{item.name}", error=item.reason)
            for item in found.left_out
        ]
        identical = f", {same} identical to rank 0's (listed once)" if same else ""
        said.append(f"rank {rank}: {len(found.files)} files under {folder}/{identical}")
    return "; ".join(said)


_STOPPED_NOTE = (
    "the job was stopped before its last outputs upload ended: these are the outputs of its "
    "last sync while it ran (outputs.sync_every_minutes; a longer cancel grace lets the last "
    "one finish)"
)


def _left_out_note(left_out: list[OutputFailure]) -> str | None:
    if not left_out:
        return None
    shown = "; ".join(f"{item.name} {item.error}" for item in left_out[:3])
    more = f" (and {len(left_out) - 3} more)" if len(left_out) > 3 else ""
    return f"left out: {shown}{more}"


def _executed_notebook(artifacts: list[Artifact], call_path: str) -> str | None:
    """The notebook ``j2c-unpack`` saved: the entry notebook's name at the top of the outputs
    (any top-level notebook when the entry's is not there)."""
    entry = PurePosixPath(call_path).name
    top = [a for a in artifacts if "/" not in a.name and a.name.endswith(".ipynb")]
    chosen = next((a for a in top if a.name == entry), top[0] if top else None)
    return chosen.url if chosen is not None else None


def _note(
    artifacts: list[Artifact],
    failed: list[OutputFailure],
    index: OutputsIndex | None,
    problem: str | None,
    *,
    uploaded: bool,
    last_lines: list[str],
) -> str | None:
    if failed:
        shown = "; ".join(f"{item.name}: {item.error}" for item in failed[:3])
        more = f" (and {len(failed) - 3} more)" if len(failed) > 3 else ""
        return f"{len(failed)} output(s) not uploaded: {shown}{more}"
    if problem is not None:
        return problem
    if uploaded and index is None:
        said = [
            line for line in last_lines if _UPLOAD_STAGE in line and not _PROGRESS_LINE.search(line)
        ]
        if said:
            return f"outputs not uploaded: {said[-1].strip()}"
        if not artifacts:
            return "no outputs: the job ended before j2c-unpack uploaded any (no outputs index)"
        return None
    if not artifacts:
        return "no outputs"
    return None


def describe_results(results: JobResults | None, *, limit: int = 20) -> list[str]:
    """The results as ``j2c status`` prints them: outputs location, each artifact with its
    size, what is missing and why, and the MLflow run with its latest metrics."""
    if results is None:
        return []
    lines = []
    if results.output_uri:
        lines.append(f"outputs    {results.output_uri}")
    for artifact in results.artifacts[:limit]:
        size = f"  ({artifact.size} B)" if artifact.size is not None else ""
        lines.append(f"  {artifact.name}{size}")
    if len(results.artifacts) > limit:
        lines.append(f"  ... and {len(results.artifacts) - limit} more")
    if results.outputs_note:
        lines.append(f"outputs    {results.outputs_note}")
    tracking = results.tracking
    if tracking is not None:
        status = f" ({tracking.status})" if tracking.status else ""
        lines.append(f"mlflow     {tracking.url}{status}")
        for name, value in sorted(tracking.metrics.items()):
            lines.append(f"  {name} = {value:g}")
        if tracking.error:
            lines.append(f"  not read: {tracking.error}")
    return lines
