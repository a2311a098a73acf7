"""An image the lab does not know yet, against a real podman and the platform image: the
preflight says so, and the job's ``j2c-unpack`` checks what the job needs before its entry point.

The container backend's probe is off (``probe_images: false``) and shipping the lab's base is
off, so nothing is known of the image when the job is sent. The lab is this machine's own
Python, whose base has regex and scipy (the platform image has neither) and numpy 2.4 (the image
has 1.24, which the lab's scipy does not accept). The job's log lists every gap at once and the
entry point never runs; the job's inventory line then teaches the lab the image.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from j2c_server.image.text import report_lines
from j2c_server.jobs.service import JobService
from j2c_server.schedulers.container import probe
from j2c_server.wire.api import JobStatus
from tests.support.jobs import diary
from tests.support.lab_python import image_request, image_settings, need_lab_packages
from tests.support.lab_python import lab_project as make_lab_project
from tests.support.podman import Podman

ENTRY = "print('ENTRY RAN', flush=True)\nimport regex\nimport scipy.stats\n"


@pytest.fixture(autouse=True)
def _lab_python_has_what_the_image_lacks() -> None:
    need_lab_packages()


@pytest.fixture
def lab_project(tmp_path: Path) -> Path:
    hello = "import numpy\nprint('numpy', numpy.__version__)\n"
    return make_lab_project(tmp_path / "proj", {"train.py": ENTRY, "hello.py": hello})


async def test_an_unknown_image_gets_every_gap_in_the_jobs_log_before_the_entry_runs(
    podman: Podman, lab_project: Path, tmp_path: Path
) -> None:
    settings = image_settings(podman, tmp_path / "data", probe=False, ship_base=False)
    service = JobService(settings)
    try:
        before = probe.probes_started
        plan = await service.preflight(image_request(lab_project, "train.py"))
        report = plan.image_report
        assert report is not None and not report.known
        assert report_lines(report) == [
            f"image {podman.image} not known yet: checked when the job starts"
        ]

        record = await service.submit(image_request(lab_project, "train.py"))
        done = await service.wait(record.id)
        events = await service.events(record.id)
        said = diary(events)
        assert probe.probes_started == before  # nothing was started to learn the image
        assert done.status == JobStatus.failed and done.exit_code == 72, said[-20:]
        assert not any("ENTRY RAN" in line for line in said)
        needs = [line for line in said if line.startswith("j2c: needs: ")]
        text = "\n".join(needs)
        assert needs[0] == "j2c: needs: this Python lacks what the job needs (every gap, at once):"
        assert "missing here: 2 packages from the lab's base:" in text
        assert "    regex (the lab has 2026" in text and "imported by train.py" in text
        assert "    scipy (the lab has 1.17" in text
        # The lab's scipy needs a newer numpy than the image's: the same list says so.
        assert "numpy 1.24.2 here, 2.4.6 in the lab: scipy 1.17.1 needs numpy" in text
        stop = next(i for i, line in enumerate(said) if "stopped before the entry point" in line)
        assert said[stop].startswith("j2c: failed: ") and "3 gaps" in said[stop]
        assert (
            said[stop + 1].startswith("j2c: hint: ") and "J2C_UNPACK_NEEDS=warn" in said[stop + 1]
        )
        # Said before anything was downloaded or extracted.
        first_needs = said.index(needs[0])
        assert not any(line.startswith("j2c: extracting") for line in said[:first_needs])
        # The manifest the job ran carried the list (format 6).
        store = tmp_path / "data" / "store"
        manifests = [
            json.loads(p.read_text()) for p in store.rglob("*.json") if "manifest" in str(p)
        ]
        assert any(m.get("format_version") == 6 and m.get("needs") for m in manifests)

        # The job's inventory line taught the lab the image: the next preflight lists the same.
        again = await service.preflight(image_request(lab_project, "train.py"))
        assert again.image_report is not None and again.image_report.known
        assert again.image_report.source == "job"
        assert {"regex", "scipy"} <= {m.name for m in again.image_report.missing}
    finally:
        await service.stop()


async def test_a_job_whose_needs_are_here_runs_and_says_what_differs(
    podman: Podman, lab_project: Path, tmp_path: Path
) -> None:
    (lab_project / "train.py").unlink()  # only numpy is imported: the image has it
    service = JobService(image_settings(podman, tmp_path / "data", probe=False, ship_base=False))
    try:
        record = await service.submit(image_request(lab_project, "hello.py"))
        done = await service.wait(record.id)
        events = await service.events(record.id)
        said = diary(events)
        assert done.status == JobStatus.succeeded, said[-20:]
        assert "j2c: needs: the job runs; some versions differ from the lab's:" in said
        assert any(
            line.startswith("j2c: needs:   numpy 1.24.2 here, 2.4.6 in the lab") for line in said
        )
        assert "numpy 1.24.2" in said
    finally:
        await service.stop()
