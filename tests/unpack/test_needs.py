"""j2c-unpack checks what the job needs of its Python before the entry point (manifest format 6).

Through the real ``j2c-unpack`` subprocess: its base is this test interpreter's base Python,
whose inventory is what the job's list is compared with. Every gap is said at once and the job
stops with exit 72 before anything is downloaded; ``J2C_UNPACK_NEEDS=warn`` runs it anyway; a
list that holds runs, and with the node cache a passed check is not made again.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from j2c_server.core.manifest_plan import JobNeedsPlan
from j2c_server.unpack.errors import ExitCode
from j2c_server.unpack.inventory import collect
from j2c_server.unpack.needs import find_gaps
from j2c_server.wire.manifest import (
    MANIFEST_FORMAT_VERSION_NEEDS,
    JobNeeds,
    Manifest,
    NeededDist,
    NeededRequirement,
    NeededWheel,
)
from tests.unpack.conftest import SmallJob
from tests.unpack.helpers import run_unpack

PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


def _base_dist() -> tuple[str, str]:
    """A distribution of this interpreter's base (what the job's inventory lists)."""
    data = collect()
    first = data["distributions"][0]
    return first["name"], first["version"]


def _with(needs: JobNeeds) -> Callable[[Manifest], Manifest]:
    def edit(manifest: Manifest) -> Manifest:
        return manifest.model_copy(
            update={"needs": needs, "format_version": MANIFEST_FORMAT_VERSION_NEEDS}
        )

    return edit


def _gappy() -> JobNeeds:
    name, _ = _base_dist()
    return JobNeeds(
        python=PYTHON,
        dists=[
            NeededDist(name="no-such-dist-a", version="1.0", why=["imported by job.py"]),
            NeededDist(name="no-such-dist-b", version="2.0", why=["nbclient 0.11.0"]),
            NeededDist(
                name=name,
                version="999",
                why=["scipy 9.0"],
                requirements=[NeededRequirement(by="scipy 9.0", specifier=">=999")],
            ),
        ],
        wheels=[
            NeededWheel(
                name="fastthing",
                version="1.0",
                tags=[f"cp311-cp311-manylinux_2_99_{os.uname().machine}"],
            )
        ],
    )


def test_every_gap_is_said_at_once_and_the_entry_never_runs(small_job: SmallJob) -> None:
    name, version = _base_dist()
    uri = small_job.publish(edit=_with(_gappy()))
    done = run_unpack(uri, "--paths", "relocate")
    assert done.returncode == ExitCode.NEEDS == 72, done.stderr
    assert "USER CODE RAN" not in done.stdout
    err = done.stderr
    assert "j2c: needs: this Python lacks what the job needs (every gap, at once):" in err
    assert "j2c: needs:   missing here: 2 packages from the lab's base:" in err
    assert "no-such-dist-a (the lab has 1.0; imported by job.py)" in err
    assert "no-such-dist-b (the lab has 2.0; nbclient 0.11.0)" in err
    assert f"{name} {version} here, 999 in the lab: scipy 9.0 needs {name}>=999" in err
    assert "the venv's fastthing 1.0 will not load: needs glibc 2.99" in err
    assert "stopped before the entry point: 4 gaps" in err
    # Before anything was fetched or placed.
    assert "j2c: downloading" not in err and "j2c: extracting" not in err


def test_warn_runs_the_job_anyway_with_the_list_said(small_job: SmallJob) -> None:
    uri = small_job.publish(edit=_with(_gappy()))
    done = run_unpack(uri, "--paths", "relocate", env={**os.environ, "J2C_UNPACK_NEEDS": "warn"})
    assert done.returncode == 0, done.stderr
    assert "USER CODE RAN" in done.stdout
    assert "no-such-dist-a (the lab has 1.0" in done.stderr
    assert "J2C_UNPACK_NEEDS=warn: running anyway" in done.stderr


def test_a_list_that_holds_runs_and_a_warm_start_checks_nothing(
    small_job: SmallJob, tmp_path: Path
) -> None:
    name, version = _base_dist()
    needs = JobNeeds(
        python=PYTHON,
        dists=[
            NeededDist(
                name=name,
                version=version + ".post1",  # another version, its requirement still holds
                why=["imported by job.py"],
                requirements=[NeededRequirement(by="x 1", specifier=f"=={version}")],
            )
        ],
    )
    uri = small_job.publish(edit=_with(needs))
    cache = tmp_path / "cache"
    first = run_unpack(uri, "--cache-dir", str(cache), "--paths", "relocate")
    assert first.returncode == 0, first.stderr
    assert "j2c: needs: the job runs; some versions differ from the lab's:" in first.stderr
    assert f"{name} {version} here, {version}.post1 in the lab (every requirement" in first.stderr
    assert list((cache / "inventory").glob("needs-*"))  # remembered for this interpreter
    warm = run_unpack(uri, "--cache-dir", str(cache), "--paths", "relocate")
    assert warm.returncode == 0, warm.stderr
    assert "j2c: needs:" not in warm.stderr and "j2c: inventory:" not in warm.stderr


def test_without_a_list_nothing_is_checked(small_job: SmallJob) -> None:
    done = run_unpack(small_job.publish(), "--paths", "relocate")
    assert done.returncode == 0 and "j2c: needs:" not in done.stderr


def _plan(needs: JobNeeds) -> JobNeedsPlan:
    return JobNeedsPlan.from_dict(needs.model_dump(mode="json"))


def test_gaps_against_an_inventory_python_versions_and_wheels() -> None:
    inventory = {
        "python": {"version": "3.11.2", "implementation": "cpython"},
        "platform": {"machine": "x86_64", "libc": "glibc", "libc_version": "2.36"},
        "distributions": [{"name": "NumPy", "version": "1.24.2"}],
    }
    needs = JobNeeds(
        python="3.12",
        lab_libc="2.39",
        dists=[
            NeededDist(
                name="numpy",
                version="2.4.6",
                why=["scipy 1.17.1"],
                requirements=[
                    NeededRequirement(by="scipy 1.17.1", specifier="<2.7,>=1.25.2"),
                    NeededRequirement(by="pandas 2", specifier=">=1.22"),
                ],
            ),
            NeededDist(name="regex", version="2026.5.9", why=["imported by train.py"]),
        ],
        wheels=[
            NeededWheel(name="ok", version="1", tags=["cp311-cp311-manylinux_2_17_x86_64"]),
            NeededWheel(name="built-here", version="1", tags=["cp311-cp311-linux_x86_64"]),
            NeededWheel(name="arm", version="1", tags=["cp311-abi3-manylinux_2_17_aarch64"]),
        ],
    )
    gaps = find_gaps(_plan(needs), inventory)
    assert gaps.python == "the venv was made with Python 3.12; this one is 3.11.2"
    assert gaps.missing == ["regex (the lab has 2026.5.9; imported by train.py)"]
    assert gaps.broken == [
        "numpy 1.24.2 here, 2.4.6 in the lab: scipy 1.17.1 needs numpy<2.7,>=1.25.2"
    ]
    assert gaps.wheels == [
        "the venv's built-here 1 will not load: built here against glibc 2.39 "
        "(linux_x86_64); the image has glibc 2.36",
        "the venv's arm 1 will not load: built for aarch64 (manylinux_2_17_aarch64); the "
        "image runs on x86_64",
    ]
    assert gaps.differ == [] and gaps.stopping


def test_a_version_this_cannot_read_is_not_judged() -> None:
    inventory = {
        "python": {"version": PYTHON + ".0"},
        "distributions": [{"name": "odd", "version": "not a version"}],
    }
    needs = JobNeeds(
        python=PYTHON,
        dists=[
            NeededDist(
                name="odd",
                version="1.0",
                why=["x"],
                requirements=[NeededRequirement(by="x 1", specifier=">=1")],
            )
        ],
    )
    gaps = find_gaps(_plan(needs), inventory)
    assert not gaps.stopping and gaps.differ
