"""Shipping the lab's base packages, against a real podman and the platform image, from a lab on
this machine's own Python (not the image's): a ``--system-site-packages`` venv made with it finds
regex, scipy and numpy 2 in its base; the image has no regex and no scipy, and numpy 1.24.

- the report names regex before any upload and says it ships; by default the job runs and
  imports it from the shipped layer; with ``ship_base`` off the report says so and the job fails
  with ``ModuleNotFoundError``, as before;
- scipy's numpy requirement against the image's numpy is a conflict, listed with both choices
  and the requirement; ``auto`` ships the lab's numpy, ``image`` keeps the image's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from j2c_server.image.text import report_lines
from j2c_server.jobs.service import JobService
from j2c_server.wire.api import EventKind, JobStatus, Stage, StageState
from tests.support.jobs import settle
from tests.support.lab_python import image_request, image_settings, lab_venv, need_lab_packages
from tests.support.podman import Podman


@pytest.fixture(autouse=True)
def _lab_python_has_what_the_image_lacks() -> None:
    need_lab_packages()


USES_REGEX = "import regex\nprint('regex from', regex.__file__, flush=True)\n"


@pytest.fixture
def regex_project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "uses_regex.py").write_text(USES_REGEX)
    lab_venv(root)
    settle(root)
    return root


async def _run(service: JobService, request) -> tuple[JobStatus, list, dict]:  # type: ignore[no-untyped-def]
    record = await service.submit(request)
    done = await service.wait(record.id)
    events = await service.events(record.id)
    scan = next(e for e in events if e.stage == Stage.scan and e.state == StageState.finished)
    first_upload = next((e.seq for e in events if e.stage == Stage.upload), None)
    assert first_upload is None or scan.seq < first_upload  # the report comes before any upload
    logs = [e.text or "" for e in events if e.kind == EventKind.log]
    return done.status, logs, scan.data["plan"]["image_report"]


async def test_a_base_only_package_ships_by_default_and_not_when_turned_off(
    podman: Podman, regex_project: Path, tmp_path: Path
) -> None:
    service = JobService(image_settings(podman, tmp_path / "data"))
    request = image_request(regex_project, "uses_regex.py")
    try:
        plan = await service.preflight(request)
        report = plan.image_report
        assert report is not None and report.known and report.shipping is not None
        [regex] = [m for m in report.missing if m.name == "regex"]
        assert report.shipping.enabled and report.shipping.names == [f"regex {regex.lab_version}"]
        lines = report_lines(report)
        [line] = [x for x in lines if x.startswith("  shipping ")]
        assert line.startswith(
            f"  shipping 1 package from the lab's base Python that image {podman.image} "
            "lacks: regex — "
        )

        status, logs, said = await _run(service, request)
        assert status == JobStatus.succeeded, logs[-15:]
        assert said["shipping"]["names"] == [f"regex {regex.lab_version}"]
        [ran] = [x for x in logs if x.startswith("regex from ")]
        assert "/.venv/j2c-base/regex/" in ran
        # The lab's base (this machine's own Python, under root's 0700 home: the job's uid
        # cannot even look) is not in the image: the image's Python, said (it crashed here).
        assert any("is not on this node: bound to this node's Python" in x for x in logs)

        off = request.model_copy(update={"ship_base": False})
        plan = await service.preflight(off)
        assert plan.image_report is not None
        lines = report_lines(plan.image_report)
        assert (
            "  not shipped (--no-ship-base): the job cannot import them (ModuleNotFoundError)"
            in lines
        )
        status, logs, _ = await _run(service, off)
        assert status == JobStatus.failed
        assert any("ModuleNotFoundError: No module named 'regex'" in x for x in logs), logs[-15:]
    finally:
        await service.stop()


async def test_a_version_conflict_is_listed_with_its_requirement_and_both_choices(
    podman: Podman, regex_project: Path, tmp_path: Path
) -> None:
    (regex_project / "stats.py").write_text("import scipy.stats\n")
    settle(regex_project)
    service = JobService(image_settings(podman, tmp_path / "data"))
    try:
        plan = await service.preflight(image_request(regex_project, "stats.py"))
        report = plan.image_report
        assert report is not None and report.shipping is not None
        [numpy] = [v for v in report.versions if v.name == "numpy"]
        assert numpy.image_version == "1.24.2"
        [need] = [b for b in numpy.broken if b.by.startswith("scipy ")]
        assert need.requirement.startswith("numpy") and ">=" in need.requirement
        shipping = report.shipping
        assert shipping.conflicts == "auto"
        assert shipping.shipped_conflicts == [f"numpy {numpy.lab_version}"]
        assert any(name.startswith("scipy ") for name in shipping.names)
        lines = report_lines(report)
        assert f"    {need.by} needs {need.requirement}; the image has numpy 1.24.2" in lines
        assert (
            f"  numpy: ship the lab's {numpy.lab_version} (--base-conflicts ship) or use the "
            "image's 1.24.2 (--base-conflicts image); now the lab's (auto)"
        ) in lines

        image = image_request(regex_project, "stats.py").model_copy(
            update={"base_conflicts": "image"}
        )
        kept = (await service.preflight(image)).image_report
        assert kept is not None and kept.shipping is not None
        assert kept.shipping.image_conflicts == ["numpy 1.24.2"]
        assert not any(name.startswith("numpy ") for name in kept.shipping.names)
    finally:
        await service.stop()


async def test_an_image_whose_j2c_unpack_is_too_old_is_named_before_upload(
    podman: Podman, regex_project: Path, tmp_path: Path
) -> None:
    from j2c_server.image.store import InventoryStore

    settings = image_settings(podman, tmp_path / "data")
    service = JobService(settings)
    request = image_request(regex_project, "uses_regex.py")
    try:
        report = (await service.preflight(request)).image_report
        assert report is not None and report.known
        store = InventoryStore(settings.data_path())
        stored = store.get(report.key)
        assert stored is not None
        # What an older j2c-unpack says of the image in a job's log: its version, no format.
        older = stored.inventory.model_copy(
            update={"j2c_version": "0.0.9", "reads_manifest_format": None}
        )
        store.put(report.key, older, "operator")
        again = (await service.preflight(request)).image_report
        assert again is not None and again.shipping is not None
        assert not again.shipping.enabled and again.shipping.names == []
        lines = report_lines(again)
        [line] = [x for x in lines if x.startswith("  not shipped (")]
        assert line.startswith(
            "  not shipped (the image's j2c-unpack (j2c 0.0.9, reads no manifest format (older "
            "than 4)) is too old for shipped base packages (format 4): install a newer j2c in "
            "the image)"
        )
    finally:
        await service.stop()
