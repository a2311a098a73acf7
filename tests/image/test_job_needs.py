"""What the manifest carries for a target not known yet: the lab-base distributions the job
needs, each with the lab's version and every requirement the job's packages put on it, and the
venv's compiled wheels (fixture dist-info folders)."""

from __future__ import annotations

from pathlib import Path

from j2c_server.image.job_needs import LabSide, job_needs
from j2c_server.image.needs import lab_dists, project_imports
from j2c_server.wire.manifest import NeededRequirement
from tests.image.fixtures import dist


def _side(venv: Path, base: Path, code: Path) -> LabSide:
    ours = lab_dists([venv])
    theirs = {k: d for k, d in lab_dists([base]).items() if k not in ours}
    return LabSide(ours, theirs, [base], [], project_imports(code, []), "3.11", True)


def test_the_list_holds_the_closure_and_the_imports_with_their_requirements(
    tmp_path: Path,
) -> None:
    venv, base, code = tmp_path / "venv", tmp_path / "base", tmp_path / "proj"
    for folder in (venv, base, code):
        folder.mkdir()
    dist(venv, "nbclient", "0.11.0", requires=("traitlets>=5.4",))
    dist(venv, "fast", "1.0", tags=("cp311-cp311-manylinux_2_28_x86_64",))
    dist(base, "traitlets", "5.15.0")
    dist(base, "scipy", "1.17.1", requires=("numpy<2.7,>=1.26.4", 'pytest; extra == "test"'))
    dist(base, "numpy", "2.4.6")
    dist(base, "unused", "1.0")
    (code / "train.py").write_text("import scipy\n")

    needs = job_needs(_side(venv, base, code))
    assert needs is not None and needs.python == "3.11"
    by_name = {d.name: d for d in needs.dists}
    assert sorted(by_name) == ["numpy", "scipy", "traitlets"]  # not the unused one
    assert by_name["scipy"].why == ["imported by train.py"]
    assert by_name["numpy"].requirements == [
        NeededRequirement(by="scipy 1.17.1", specifier="<2.7,>=1.26.4")
    ]
    assert by_name["traitlets"].version == "5.15.0"
    assert by_name["traitlets"].requirements == [
        NeededRequirement(by="nbclient 0.11.0", specifier=">=5.4")
    ]
    assert [(w.name, w.tags) for w in needs.wheels] == [
        ("fast", ["cp311-cp311-manylinux_2_28_x86_64"])
    ]


def test_a_job_needing_nothing_of_the_base_carries_no_list(tmp_path: Path) -> None:
    venv, base, code = tmp_path / "venv", tmp_path / "base", tmp_path / "proj"
    for folder in (venv, base, code):
        folder.mkdir()
    dist(venv, "purelib-only", "1.0")
    dist(base, "numpy", "2.4.6")
    (code / "job.py").write_text("import os\nimport purelib_only\n")
    assert job_needs(_side(venv, base, code)) is None
