"""Preflight never runs a project's files. A cloned or shared project brings its own venv, whose
``pyvenv.cfg`` names the interpreter (``executable``, ``home``): before, ``POST /preflight`` (a
read) and every send ran it on the lab server to learn its ``sys.path``. Now the venv is read as
data, and an interpreter runs only when it is the lab's own Python. Through the real server.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from j2c_server.pack import PackSpec, preflight
from j2c_server.pack.venv import probe_interpreter
from tests.support.jobs import job_body, settle
from tests.support.projects import make_venv, write

VERSION = f"{sys.version_info[0]}.{sys.version_info[1]}"


def _hostile_base(where: Path, marker: Path) -> Path:
    """A ``home`` folder whose every ``python*`` would leave ``marker`` if it ran."""
    where.mkdir(parents=True)
    for name in ("python3", f"python{VERSION}", "python"):
        write(where / name, f"#!/bin/sh\necho ran >> {marker}\n")
        (where / name).chmod(0o755)
    return where


def _point_at(venv: Path, home: Path) -> None:
    cfg = venv / "pyvenv.cfg"
    lines = [
        line
        for line in cfg.read_text().splitlines()
        if not line.startswith(("home", "executable", "command"))
    ]
    lines += [f"home = {home}", f"executable = {home / 'python3'}"]
    cfg.write_text("\n".join(lines) + "\n")


async def test_a_preflight_of_a_project_whose_venv_names_a_hostile_interpreter_runs_nothing(
    jp_fetch: Any, jp_root_dir: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "it-ran"
    project = jp_root_dir / "proj"
    write(project / "train.py", "print('hi')\n")
    venv = make_venv(project / ".venv")
    _point_at(venv, _hostile_base(project / "tools" / "bin", marker))
    settle(project)

    answer = await jp_fetch(
        "j2c",
        "api",
        "preflight",
        method="POST",
        body=json.dumps(job_body(venv_path="proj/.venv")),
    )

    assert answer.code == 200
    assert not marker.exists(), "preflight ran the project's interpreter"
    plan = json.loads(answer.body)
    assert plan["venv"]["python_version"] == VERSION  # read from pyvenv.cfg


def test_the_labs_own_python_is_still_asked_for_its_packages(tmp_path: Path) -> None:
    """A venv made from this lab's Python: its base is asked for its ``sys.path`` (the very file
    this process was made from), so a venv package that hides one of the base's is named."""
    project = tmp_path / "project"
    write(project / "train.py", "print('hi')\n")
    venv = make_venv(tmp_path / "venv", packages={"six": "0.1"})  # the base has six 1.x
    plan = preflight(PackSpec(code_path=project, call_path="train.py", venv_path=venv))
    assert [w.path for w in plan.warnings if w.code == "shadowed_package"] == ["six"]


def test_an_answer_that_is_not_the_probes_is_no_interpreter(tmp_path: Path) -> None:
    """The side bug: an interpreter's answer without the probe's keys raised KeyError (a 500)."""
    odd = tmp_path / "odd-python"
    write(odd, "#!/bin/sh\necho '{\"unexpected\": 1}'\n")
    odd.chmod(0o755)
    assert probe_interpreter(str(odd)) is None
