"""The job's needs against an inventory (fixture dist-info folders and fake inventories)."""

from __future__ import annotations

import json
from pathlib import Path

from j2c_server.image.diff import compare, wheel_problem
from j2c_server.image.needs import lab_dists, project_imports
from j2c_server.image.text import report_lines
from j2c_server.wire.image import ImageInventory, ImageReport
from tests.image.fixtures import dist, inventory


def _lab(tmp_path: Path) -> tuple[Path, Path, Path]:
    venv, base, code = tmp_path / "venv", tmp_path / "base", tmp_path / "proj"
    for folder in (venv, base, code):
        folder.mkdir()
    return venv, base, code


def _report(venv: Path, base: Path, code: Path, inv: dict[str, object]) -> ImageReport:
    ours = lab_dists([venv])
    theirs = {k: d for k, d in lab_dists([base]).items() if k not in ours}
    found = compare(
        ours, theirs, project_imports(code, []), ImageInventory.model_validate(inv), "2.36"
    )
    return ImageReport(
        target="image x",
        key="image:x",
        known=True,
        missing=found.missing,
        versions=found.versions,
        wheels=found.wheels,
        shadows=found.shadows,
    )


def test_base_packages_the_venv_needs_or_the_code_imports_are_named_with_why_and_size(
    tmp_path: Path,
) -> None:
    venv, base, code = _lab(tmp_path)
    dist(venv, "nbclient", "0.10.2", requires=("traitlets>=5.4", "jupyter-client>=6.1.12"))
    dist(venv, "jupyter-client", "8.6.0", modules=("jupyter_client",))
    traitlets = dist(base, "traitlets", "5.14.3", size=4000)
    regex = dist(base, "regex", "2026.5.9", size=3000)
    dist(base, "unused", "1.0")
    (code / "train.py").write_text(
        "import regex\nimport os\nfrom . import sibling\nimport helper\n"
    )
    (code / "helper.py").write_text("import json\n")
    report = _report(venv, base, code, inventory({"numpy": "1.24.2"}))
    # Sizes by RECORD; a file it lists without a size (METADATA here) is stat'ed.
    sizes = [
        3000 + (regex / "METADATA").stat().st_size,
        4000 + (traitlets / "METADATA").stat().st_size,
    ]
    assert [(m.name, m.lab_version, m.bytes, m.needed_by) for m in report.missing] == [
        ("regex", "2026.5.9", sizes[0], ["imported by train.py"]),
        ("traitlets", "5.14.3", sizes[1], ["nbclient 0.10.2"]),
    ]
    lines = report_lines(report)
    assert lines[0] == "image x differs from the lab:"
    assert "  missing in the image: 2 packages from the lab's base Python (7.1 kB):" in lines
    assert "    traitlets 5.14.3 (4.1 kB; nbclient 0.10.2)" in lines


def test_a_version_conflict_is_reported_with_the_requirement_it_breaks(tmp_path: Path) -> None:
    venv, base, code = _lab(tmp_path)
    dist(base, "scipy", "1.17.1", requires=("numpy<2.7,>=1.25.2",))
    dist(base, "numpy", "2.4.6")
    (code / "fit.py").write_text("import scipy.stats\n")
    inv = inventory({"numpy": "1.24.2", "scipy": "1.17.1"})
    report = _report(venv, base, code, inv)
    assert report.missing == []
    [numpy] = report.versions
    assert (numpy.name, numpy.lab_version, numpy.image_version) == ("numpy", "2.4.6", "1.24.2")
    assert [(b.by, b.requirement) for b in numpy.broken] == [("scipy 1.17.1", "numpy<2.7,>=1.25.2")]
    assert report_lines(report)[1:] == [
        "  numpy 2.4.6 in the lab, 1.24.2 in the image:",
        "    scipy 1.17.1 needs numpy<2.7,>=1.25.2; the image has numpy 1.24.2",
    ]
    # An image whose numpy still satisfies scipy: a difference, nothing broken.
    ok = _report(venv, base, code, inventory({"numpy": "2.0.0", "scipy": "1.17.1"}))
    assert ok.versions[0].broken == []
    assert report_lines(ok)[1:] == ["  numpy 2.4.6 in the lab, 2.0.0 in the image"]


def test_markers_are_evaluated_for_the_images_python_not_the_labs(tmp_path: Path) -> None:
    venv, base, code = _lab(tmp_path)
    dist(
        venv,
        "tool",
        "1.0",
        requires=('tomli>=1; python_version < "3.11"', 'extra-only; extra == "x"'),
    )
    dist(base, "tomli", "2.0.1")
    dist(base, "extra-only", "1.0")
    assert _report(venv, base, code, inventory(python="3.11.2")).missing == []
    older = _report(venv, base, code, inventory(python="3.10.12"))
    assert [m.name for m in older.missing] == ["tomli"]


def test_optional_and_type_checking_imports_and_notebook_magics(tmp_path: Path) -> None:
    venv, base, code = _lab(tmp_path)
    for name in ("ujson", "typing-only", "plotly", "pandas"):
        dist(base, name, "1.0", modules=(name.replace("-", "_"),))
    (code / "a.py").write_text(
        "try:\n    import ujson\nexcept ImportError:\n    ujson = None\n"
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import typing_only\n"
    )
    notebook = {
        "cells": [
            {"cell_type": "code", "source": ["%matplotlib inline\n", "import plotly\n"]},
            {"cell_type": "markdown", "source": "import pandas"},
            {"cell_type": "code", "source": "!pip list\nx = (1"},  # a syntax error: skipped
        ]
    }
    (code / "nb.ipynb").write_text(json.dumps(notebook))
    hidden = code / ".hidden"
    hidden.mkdir()
    (hidden / "x.py").write_text("import pandas\n")
    cached = code / "build-cache"
    cached.mkdir()
    (cached / "CACHEDIR.TAG").write_text("Signature: 8a477f597d28d172789f06886806bc55\n")
    (cached / "y.py").write_text("import pandas\n")
    report = _report(venv, base, code, inventory())
    assert [(m.name, m.needed_by) for m in report.missing] == [("plotly", ["imported by nb.ipynb"])]


def test_a_compiled_wheel_needing_a_newer_glibc_is_reported(tmp_path: Path) -> None:
    venv, base, code = _lab(tmp_path)
    dist(venv, "fastlib", "3.0", tags=("cp311-cp311-manylinux_2_38_x86_64",))
    dist(venv, "oldlib", "1.0", tags=("cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64",))
    dist(venv, "abi3lib", "1.0", tags=("cp38-abi3-manylinux_2_28_x86_64",))
    report = _report(venv, base, code, inventory(glibc="2.36"))
    assert [(w.name, w.reason) for w in report.wheels] == [
        ("fastlib", "needs glibc 2.38 (manylinux_2_38_x86_64); the image has glibc 2.36")
    ]
    assert "  the venv's fastlib 3.0 will not load: needs glibc 2.38" in report_lines(report)[1]
    inv = ImageInventory.model_validate(inventory(glibc="2.36"))
    assert wheel_problem(("cp311-cp311-manylinux2014_x86_64",), inv, None) is None
    assert "musl" in (wheel_problem(("cp311-cp311-musllinux_1_2_x86_64",), inv, None) or "")
    assert "aarch64" in (wheel_problem(("cp311-cp311-manylinux_2_17_aarch64",), inv, None) or "")
    assert "CPython 3.12" in (
        wheel_problem(("cp312-cp312-manylinux_2_17_x86_64",), inv, None) or ""
    )
    assert "against glibc 2.39" in (wheel_problem(("cp311-cp311-linux_x86_64",), inv, "2.39") or "")
    assert wheel_problem(("py3-none-any",), inv, None) is None


def test_a_venv_package_shadowing_one_the_images_packages_need(tmp_path: Path) -> None:
    venv, base, code = _lab(tmp_path)
    dist(venv, "numpy", "2.4.6")
    dist(venv, "rich", "13.0")  # in the image too, but no image package needs it
    inv = inventory(
        {"numpy": "1.24.2", "torch": "2.1.0", "rich": "12.0"}, requires={"torch": ["numpy<2"]}
    )
    report = _report(venv, base, code, inv)
    [shadow] = report.shadows
    assert (shadow.name, shadow.venv_version, shadow.image_version) == ("numpy", "2.4.6", "1.24.2")
    assert shadow.required_by == ["torch 2.1.0"]
    assert [(b.by, b.requirement) for b in shadow.broken] == [("torch 2.1.0", "numpy<2")]
    assert report_lines(report)[1:] == [
        "  the venv's numpy 2.4.6 shadows the image's 1.24.2, which torch 2.1.0 use",
        "    torch 2.1.0 needs numpy<2: the venv's numpy 2.4.6 fails it",
    ]


def test_an_unknown_target_says_so_and_nothing_differing_says_nothing() -> None:
    unknown = ImageReport(
        target="image x",
        key="image:x",
        known=False,
        message="image x not known yet: checked when the job starts",
    )
    assert report_lines(unknown) == ["image x not known yet: checked when the job starts"]
    assert report_lines(ImageReport(target="image x", key="image:x", known=True)) == []
    assert report_lines(None) == []
