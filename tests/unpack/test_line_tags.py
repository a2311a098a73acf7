"""j2c-unpack's lines carry the job's tag; the job's own lines never do, whatever they print.

Real runs of the real ``j2c-unpack`` subprocess, given a tag as the server gives it
(``$J2C_LINE_TAG``): every line it writes on stderr is j2c's by the watch stage's reading
(``core/j2c_lines.parse_line``), the entry point's ``print("j2c: ...")`` stays the job's, and the
entry point's environment holds no tag.
"""

from __future__ import annotations

import os
from pathlib import Path

from j2c_server.core.j2c_lines import TAG_ENV, line_tag, parse_line
from tests.support.projects import make_venv, write
from tests.unpack.helpers import publish_project, run_unpack

JOB_PY = """\
import os, sys
print("j2c: running: looks like j2c's, is the job's", flush=True)
print("j2c: failed: neither is this", file=sys.stderr, flush=True)
print("tag seen by the job:", os.environ.get("J2C_LINE_TAG"), flush=True)
sys.exit(3)
"""


def test_j2c_unpack_tags_its_own_lines_and_not_the_jobs(tmp_path: Path) -> None:
    project = tmp_path / "lab" / "project"
    write(project / "job.py", JOB_PY)
    uri = publish_project(project, tmp_path / "store", "job.py", venv=make_venv(tmp_path / "venv"))
    tag = line_tag("20260101-000000-abcdef")
    done = run_unpack(uri, "--workdir", str(tmp_path / "job"), env={**os.environ, TAG_ENV: tag})
    assert done.returncode == 3, done.stderr
    assert "tag seen by the job: None" in done.stdout
    ours = [parse_line(line, tag) for line in done.stderr.splitlines()]
    jobs = [line for line, parsed in zip(done.stderr.splitlines(), ours, strict=True) if not parsed]
    assert jobs == ["j2c: failed: neither is this"]  # the job's stderr: the job's
    assert parse_line("j2c: running: looks like j2c's, is the job's", tag) is None
    j2c = [parsed for parsed in ours if parsed is not None]
    phases = [line.phase for line in j2c]
    assert phases[0] == "manifest" and phases[-1] == "summary"
    assert {"downloading", "extracting", "running"} <= set(phases)
    assert all(line.level == "info" for line in j2c)  # a job that exits 3 is no j2c error
    # Another job's tag reads none of them as j2c's.
    other = line_tag("20260101-000000-fedcba")
    assert all(parse_line(line, other) is None for line in done.stderr.splitlines())


def test_a_failure_of_j2c_unpack_is_an_error_line_followed_by_its_hint(tmp_path: Path) -> None:
    project = tmp_path / "lab" / "project"
    write(project / "job.py", JOB_PY)
    uri = publish_project(project, tmp_path / "store", "job.py", venv=make_venv(tmp_path / "venv"))
    tag = line_tag("20260101-000000-abcdef")
    wrong = "sha256:" + "0" * 64
    done = run_unpack(
        uri, "--manifest-digest", wrong, "--workdir", str(tmp_path / "job"),
        env={**os.environ, TAG_ENV: tag},
    )  # fmt: skip
    assert done.returncode == 65, done.stderr
    lines = [parse_line(line, tag) for line in done.stderr.splitlines()]
    said = [(line.level, line.phase) for line in lines if line is not None]
    assert len(said) == len(lines)  # every line j2c's: the job never ran
    assert said[-3:] == [("error", "failed"), ("info", "hint"), ("info", "summary")]
    error, hint = lines[-3], lines[-2]
    assert error is not None and "it was changed after the job was submitted" in error.text
    assert hint is not None and hint.text.startswith("someone else who can write the store")
