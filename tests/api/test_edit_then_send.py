"""Edit → Send runs the edit: a send attaches to a job only when the request *and* the content it
would ship are unchanged, through the real server (REST, local scheduler, ``file://`` store)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from j2c_server.wire.api import JobRecord, JobStatus
from tests.support.jobs import follow, log_lines, submit
from tests.support.projects import make_venv, site_packages

EDITED = "print('edited version', flush=True)\n"


def _edit(path: Path, text: str) -> None:
    """Write ``path`` as a user's edit: a new mtime, older than the packer's racy window."""
    path.write_text(text)
    when = time.time() - 60
    os.utime(path, (when, when))


async def _run(jp_fetch: Any, jp_ws_fetch: Any, **fields: Any) -> tuple[JobRecord, list[str]]:
    record = await submit(jp_fetch, **fields)
    events = await follow(jp_ws_fetch, record.id)
    return record, log_lines(events)


async def test_an_edited_file_sends_a_new_job_that_runs_the_edit(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path
) -> None:
    first, _ = await _run(jp_fetch, jp_ws_fetch)
    _edit(project / "train.py", EDITED)
    second, lines = await _run(jp_fetch, jp_ws_fetch)
    assert second.id != first.id
    assert lines == ["edited version"]
    assert second.decision is not None and not second.decision.attached
    assert second.decision.previous_job == first.id
    assert second.decision.changed_files == 1
    assert [(c.path, c.change) for c in second.decision.changes] == [("train.py", "changed")]
    assert second.decision.message == f"1 file changed since job {first.id}: sending a new job"


async def test_an_unchanged_send_attaches_to_the_finished_job(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path
) -> None:
    first, _ = await _run(jp_fetch, jp_ws_fetch)
    again = await submit(jp_fetch)
    assert again.id == first.id
    assert again.status == JobStatus.succeeded
    assert again.decision is not None and again.decision.attached
    assert again.decision.message == f"nothing changed since job {first.id} (succeeded): showing it"


async def test_added_and_removed_files_each_make_a_new_job(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path
) -> None:
    first, _ = await _run(jp_fetch, jp_ws_fetch)
    _edit(project / "helpers" / "extra.py", "X = 1\n")
    added, _ = await _run(jp_fetch, jp_ws_fetch)
    assert added.id != first.id
    assert added.decision is not None
    assert [(c.path, c.change) for c in added.decision.changes] == [("helpers/extra.py", "added")]
    (project / "helpers" / "extra.py").unlink()
    removed, _ = await _run(jp_fetch, jp_ws_fetch)
    assert removed.id not in (first.id, added.id)
    assert removed.decision is not None
    assert [(c.path, c.change) for c in removed.decision.changes] == [
        ("helpers/extra.py", "removed")
    ]


async def test_a_changed_venv_sends_a_new_job_and_an_unchanged_one_is_reused(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path
) -> None:
    venv = make_venv(project.parent / "venv")
    first, _ = await _run(jp_fetch, jp_ws_fetch, venv_path="venv")
    _edit(project / "train.py", EDITED)
    code_edit, lines = await _run(jp_fetch, jp_ws_fetch, venv_path="venv")
    assert lines == ["edited version"]
    pack = await _stage_text(jp_fetch, code_edit.id, "pack")
    assert f"venv layer reused: unchanged since job {first.id}" in pack

    _edit(site_packages(venv) / "newpkg.py", "Y = 2\n")
    venv_edit = await submit(jp_fetch, venv_path="venv")
    assert venv_edit.id != code_edit.id
    assert venv_edit.decision is not None
    assert [(c.layer.value, c.change) for c in venv_edit.decision.changes] == [("venv", "added")]
    await follow(jp_ws_fetch, venv_edit.id)


async def test_a_changed_setting_is_named_in_the_decision(
    jp_fetch: Any, jp_ws_fetch: Any, project: Path
) -> None:
    first, _ = await _run(jp_fetch, jp_ws_fetch, args=["--lines", "1"])
    second = await submit(jp_fetch, args=["--lines", "2"])
    assert second.id != first.id
    assert second.decision is not None
    assert second.decision.changed_settings == ["args"]
    assert second.decision.message == (
        f"settings changed (args) since job {first.id}: sending a new job"
    )
    await follow(jp_ws_fetch, second.id)


async def _stage_text(jp_fetch: Any, job_id: str, stage: str) -> str:
    response = await jp_fetch("j2c", "api", "jobs", job_id, "events", params={"after": "0"})
    events = json.loads(response.body)
    return " ".join(
        e["text"] or ""
        for e in events
        if e.get("stage") == stage and e.get("state") in ("finished", "reused")
    )
