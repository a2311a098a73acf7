"""Stage keys and what a stage reuses: each stage's inputs hashed into its key, compared with the
same stage of the project's previous job to say what changed, and from which job a layer or an
upload is reused."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from j2c_server.pack import PackResult, PublishResult
from j2c_server.wire.api import JobRecord, Stage, StageRecord, StageState
from j2c_server.wire.manifest import LayerRole


def digest_of(value: Any) -> str:
    """A short, stable hash of a JSON-able value."""
    blob = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:24]


@dataclass
class StageInputs:
    """A stage's inputs by name; the key hashes them all, the parts say what changed."""

    values: dict[str, Any]

    @property
    def parts(self) -> dict[str, str]:
        return {name: digest_of(value) for name, value in self.values.items()}

    @property
    def key(self) -> str:
        return digest_of(self.parts)

    def changed_since(self, record: StageRecord) -> list[str]:
        before: dict[str, str] = record.output.get("inputs", {})
        return [name for name, part in self.parts.items() if before.get(name) != part]


def configure_changes(
    inputs: StageInputs, previous: JobRecord | None
) -> tuple[StageState, dict[str, Any]]:
    """Whether configure reuses the previous job's spec, and the facts that say why."""
    earlier = previous.stages.get(Stage.configure.value) if previous else None
    if previous is None or earlier is None:
        return StageState.finished, {"since": None, "changed": []}
    if earlier.key == inputs.key:
        return StageState.reused, {"since": previous.id, "changed": []}
    return StageState.finished, {"since": previous.id, "changed": inputs.changed_since(earlier)}


def layers_of(record: JobRecord | None) -> dict[str, dict[str, Any]]:
    if record is None or Stage.pack.value not in record.stages:
        return {}
    layers: list[dict[str, Any]] = record.stages[Stage.pack.value].output.get("layers", [])
    return {entry["digest"]: entry for entry in layers}


def reused_since(previous: JobRecord | None, stage: Stage, inputs: StageInputs) -> str | None:
    earlier = previous.stages.get(stage.value) if previous else None
    if previous is not None and earlier is not None and earlier.key == inputs.key:
        return previous.id
    return None


def pack_outcome(
    result: PackResult, previous: JobRecord | None, job_id: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pack stage's facts per layer (its event's data: outcome, the job it is reused from,
    what the project's previous job was) and its record's output, which keeps per layer the job
    that first packed it: the next job's ``reused_from``."""
    earlier = layers_of(previous)
    changed_since = (
        previous.id if previous is not None and previous.stages.get(Stage.pack.value) else None
    )
    facts: list[dict[str, Any]] = []
    parts = len(result.code_parts())
    part = 0
    for packed in result.layers:
        layer = packed.layer
        before = earlier.get(layer.digest)
        outcome = "reused" if packed.reused else ("same_content" if before else "packed")
        fact = {
            "role": layer.role.value,
            "digest": layer.digest,
            "files": layer.files,
            "size": layer.size,
            "outcome": outcome,
            "reused_from": before["since"] if before else None,
            "changed_since": changed_since,
        }
        if layer.role == LayerRole.code and parts > 1:  # a code layer in parts: which one
            part += 1
            fact.update(part=part, parts=parts)
        facts.append(fact)
    layers = [
        {
            "role": fact["role"],
            "digest": fact["digest"],
            "size": fact["size"],
            "reused": fact["outcome"] == "reused",
            "since": fact["reused_from"] or job_id,
        }
        for fact in facts
    ]
    return facts, layers


def upload_outcome(
    published: PublishResult, previous: JobRecord | None, inputs: StageInputs
) -> tuple[StageState, dict[str, Any]]:
    """The upload stage's state (reused when nothing was sent) and its event's facts."""
    nothing_sent = not published.uploaded and not published.manifest_uploaded
    facts = {
        "uploaded": [role.value for role in published.uploaded],
        "already_present": [role.value for role in published.already_present],
        "files_uploaded": list(published.files_uploaded),
        "bytes_uploaded": published.bytes_uploaded,
        "manifest_bytes": published.manifest_size if published.manifest_uploaded else 0,
        "manifest_uri": published.manifest_uri,
        "reused_from": reused_since(previous, Stage.upload, inputs) if nothing_sent else None,
    }
    return (StageState.reused if nothing_sent else StageState.finished), facts
