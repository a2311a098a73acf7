"""The results stage's outputs, for every backend: what ``j2c-unpack`` uploaded, read from the
store's outputs index, merged with what the scheduler itself returns.

``j2c-unpack --output-uri <store>/jobs/<id>/outputs`` writes ``.j2c-outputs.json`` there after
the run (also after a failed one): each uploaded file's name, size and sha256, and the files it
could not upload with the reason. A scheduler that keeps the job's outputs folder on this machine
(local, container) returns that folder's listing and location, which stays the record's (it is
the same files, and what was there before the store copy); the index adds the digests and the
upload failures. A scheduler that returns none (Slurm, Kubernetes) gets the index's files, served
from the store. The record then says, in ``outputs_note``, when there are no outputs, or which
were not uploaded and why (from the index, or from ``j2c-unpack``'s log when there is no index).
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import PurePosixPath

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import StorageError
from ..models import Artifact, JobRecord, JobResults, OutputFailure
from ..storage import ObjectStore
from ..storage.errors import ObjectNotFound
from ..unpack.outputs import INDEX_NAME

log = logging.getLogger(__name__)

MAX_ARTIFACTS = 1000
_UPLOAD_STAGE = "uploading outputs"
# j2c-unpack's own start and done lines of that stage ("3 files, 1.0 kB to", "3 files uploaded").
_PROGRESS_LINE = re.compile(r"\d+ files(,| uploaded)")


class IndexedFile(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str
    size: int
    sha256: str


class OutputsIndex(BaseModel):
    """``.j2c-outputs.json`` as ``j2c_server.unpack.outputs`` writes it."""

    model_config = ConfigDict(extra="ignore")

    format: int = 1
    files: list[IndexedFile] = Field(default_factory=list)
    failed: list[OutputFailure] = Field(default_factory=list)


def outputs_prefix(job_id: str) -> str:
    return f"jobs/{job_id}/outputs"


async def read_index(store: ObjectStore, job_id: str) -> tuple[OutputsIndex | None, str | None]:
    """The job's outputs index, or None and why not (None, None: there is none)."""
    key = f"{outputs_prefix(job_id)}/{INDEX_NAME}"
    try:
        raw = await store.get_bytes(key)
    except ObjectNotFound:
        return None, None
    except StorageError as exc:
        return None, f"the outputs index {store.uri(key)} could not be read: {exc.message}"
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
) -> JobResults:
    """``results`` (the scheduler's) with the outputs the store's index lists. ``uploaded``:
    whether the job was told to upload its outputs (not with presigned URLs); ``last_lines``:
    the job's last log lines, where ``j2c-unpack`` says why an upload failed."""
    index, problem = await read_index(store, record.id) if uploaded else (None, None)
    artifacts = list(results.artifacts)
    output_uri = results.output_uri
    notebook = results.executed_notebook
    if index is not None:
        digests = {item.name: item for item in index.files}
        if output_uri is None:
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
        else:
            artifacts = [_with_digest(artifact, digests) for artifact in artifacts]
    if notebook is None:
        notebook = _executed_notebook(artifacts, record.request.call_path)
    failed = index.failed if index is not None else []
    note = _note(artifacts, failed, index, problem, uploaded=uploaded, last_lines=last_lines)
    return results.model_copy(
        update={
            "artifacts": artifacts,
            "output_uri": output_uri,
            "executed_notebook": notebook,
            "failed_outputs": failed,
            "outputs_note": note,
        }
    )


def _with_digest(artifact: Artifact, digests: dict[str, IndexedFile]) -> Artifact:
    item = digests.get(artifact.name)
    if item is None or (artifact.size is not None and artifact.size != item.size):
        return artifact
    return artifact.model_copy(update={"sha256": item.sha256})


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
