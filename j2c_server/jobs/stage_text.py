"""The words of every stage event, built from the event's structured data, for every front end.

The pipeline records facts (``Event.data``: counts, bytes, the layers and whether each was
reused, the job it was reused from, which inputs changed); :func:`describe` turns them into the
event's ``text``. The text never starts with the stage's name: every front end already shows the
stage as a label (the CLI's first column, the UI's step), so none has to strip it again. A
client that wants other words can build them from the same data; a test checks that every stage
event of a real job reads exactly as :func:`describe` makes it from its data.

The data of each stage, by state (``started`` events carry only what their words need):

- scan, finished: ``files``, ``bytes``, ``layers`` (roles), ``excluded``, ``warnings``, ``plan``
- pack, finished/reused: ``layers``: ``role``, ``digest``, ``files``, ``size``, ``outcome``
  (``reused`` | ``same_content`` | ``packed``), ``reused_from`` (a job id or None: an earlier
  pack outside the registry), ``changed_since`` (the project's previous job, None on a first
  pack); a code layer in parts also has ``part`` and ``parts`` (1-based, in order) in each
  part's entry, and reads as one line; ``big_files`` packed again as their own blobs
  (``path``, ``size``)
- upload, finished/reused: ``uploaded`` and ``already_present`` (roles, once per code part),
  ``files_uploaded`` (big files' paths), ``bytes_uploaded``, ``manifest_uri``, ``reused_from``
- configure, finished/reused: ``changed`` (input names), ``since`` (the previous job), ``image``,
  ``command``
- submit: started ``scheduler``; finished ``scheduler``, ``scheduler_job_id``
- watch: started ``scheduler_job_id``, ``resumed``; finished ``status``
- results, finished: ``exit_code``, ``status``
- any stage, failed: ``error``
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from j2c_server.core.units import byte_size, count
from j2c_server.wire.api import Stage, StageState

_STARTED = {
    Stage.scan: "walking the project and the venv",
    Stage.pack: "writing changed layers",
    Stage.upload: "sending missing layers",
    Stage.configure: "building the job spec",
    Stage.results: "collecting exit code and outputs",
}


def describe(stage: Stage, state: StageState, data: Mapping[str, Any]) -> str:
    """The text of a stage event with this data."""
    if state == StageState.failed:
        return str(data.get("error", "failed"))
    if state == StageState.started:
        return _started(stage, data)
    return _DONE[stage](state, data)


def _started(stage: Stage, data: Mapping[str, Any]) -> str:
    if stage == Stage.submit:
        return f"sending the job to {data['scheduler']}"
    if stage == Stage.watch:
        again = " again (the process that watched it stopped)" if data.get("resumed") else ""
        return f"following {data['scheduler_job_id']}{again}"
    return _STARTED[stage]


def _scan(state: StageState, data: Mapping[str, Any]) -> str:
    roles: list[str] = data["layers"]
    noun = "layers" if len(roles) > 1 else "layer"
    text = f"{count(data['files'], 'file')}, {byte_size(data['bytes'])} "
    text += f"({' and '.join(roles)} {noun})"
    if data.get("excluded"):
        text += f"; {data['excluded']} paths left out"
    for warning in data.get("warnings", []):
        text += f"; warning: {warning}"
    return text


def pack_layer_text(layer: Mapping[str, Any]) -> str:
    """One layer's line of the pack stage."""
    role = layer["role"]
    if layer["outcome"] == "reused":
        origin = f"since job {layer['reused_from']}" if layer.get("reused_from") else None
        return f"{role} layer reused: unchanged {origin or 'since an earlier pack'}"
    if layer["outcome"] == "same_content":
        return f"{role} layer re-packed: same content as job {layer['reused_from']}"
    since = layer.get("changed_since")
    why = f"changed since job {since}" if since else "first pack of this project"
    amount = f"{count(layer['files'], 'file')}, {byte_size(layer['size'])}"
    return f"{role} layer packed: {amount} ({why})"


def pack_parts_text(parts: list[Mapping[str, Any]]) -> str:
    """The line of a code layer in parts: how many were packed, how many reused."""
    role = parts[0]["role"]
    packed = [part for part in parts if part["outcome"] != "reused"]
    if not packed:
        since = parts[0].get("reused_from")
        origin = f"since job {since}" if since else "since an earlier pack"
        return f"{role} layer reused: {len(parts)} parts unchanged {origin}"
    since = parts[0].get("changed_since")
    why = f"changed since job {since}" if since else "first pack of this project"
    size = byte_size(sum(part["size"] for part in packed))
    return (
        f"{role} layer: {len(packed)} of {len(parts)} parts packed ({size}), "
        f"{len(parts) - len(packed)} reused ({why})"
    )


def _pack(state: StageState, data: Mapping[str, Any]) -> str:
    lines: list[str] = []
    parts: list[Mapping[str, Any]] = []
    for layer in data["layers"]:
        if layer.get("parts"):
            parts.append(layer)
            if layer["part"] == layer["parts"]:
                lines.append(pack_parts_text(parts))
                parts = []
            continue
        lines.append(pack_layer_text(layer))
    if parts:  # a record cut short: its parts still said
        lines.append(pack_parts_text(parts))
    lines += [
        f"big file {big['path']} packed: {byte_size(big['size'])}, its own blob"
        for big in data.get("big_files", [])
    ]
    return "; ".join(lines)


def _upload(state: StageState, data: Mapping[str, Any]) -> str:
    if state == StageState.reused:
        since = data.get("reused_from")
        origin = f" (since job {since})" if since else ""
        return f"layers and manifest already in the store{origin}"
    uploaded: list[str] = data["uploaded"]
    there: list[str] = data.get("already_present", [])
    # A code layer in parts lists its role once per part: said once, with the count.
    sent = []
    for role in dict.fromkeys(uploaded):
        parts = uploaded.count(role) + there.count(role)
        of = f" ({uploaded.count(role)} of {parts} parts)" if parts > 1 else ""
        sent.append(f"{role} layer{of}")
    sent += [f"big file {path}" for path in data.get("files_uploaded", [])]
    sent = sent or ["manifest"]
    text = f"uploaded {', '.join(sent)} ({byte_size(data['bytes_uploaded'])})"
    present = [role for role in dict.fromkeys(there) if role not in uploaded]
    if present:
        text += f"; {', '.join(f'{role} layer' for role in present)} already in the store"
    return text


def _configure(state: StageState, data: Mapping[str, Any]) -> str:
    since = data.get("since")
    if since is None:
        return "job spec built"
    if state == StageState.reused:
        return f"unchanged since job {since}"
    return f"{', '.join(data['changed'])} changed since job {since}: job spec rebuilt"


def _submit(state: StageState, data: Mapping[str, Any]) -> str:
    return f"submitted to {data['scheduler']} as {data['scheduler_job_id']}"


def _watch(state: StageState, data: Mapping[str, Any]) -> str:
    return f"job ended ({data['status']})"


def _results(state: StageState, data: Mapping[str, Any]) -> str:
    code = data.get("exit_code")
    return f"exit code {code}" if code is not None else str(data["status"])


_DONE = {
    Stage.scan: _scan,
    Stage.pack: _pack,
    Stage.upload: _upload,
    Stage.configure: _configure,
    Stage.submit: _submit,
    Stage.watch: _watch,
    Stage.results: _results,
}
