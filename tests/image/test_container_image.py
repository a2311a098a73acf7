"""The image check against a real podman and the platform image, from a lab on this machine's
own Python: a ``--system-site-packages`` venv made with it finds regex, scipy and numpy 2 in
its base, which the platform image lacks (or has at 1.24).

- preflight: the image is probed once (a container through the engine), the report names the
  base-only packages the code imports and scipy's numpy requirement the image fails; a second
  preflight starts no container;
- submit: the report is in the scan's plan, before any upload; the job's ``j2c-unpack`` says its
  inventory, the server keeps it for the image's ID, and the next preflight reads that one
  without starting anything.
"""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

import httpx
import pytest

from j2c_server.image.store import InventoryStore
from j2c_server.image.text import report_lines
from j2c_server.jobs.service import JobService
from j2c_server.schedulers.container import probe
from j2c_server.schedulers.container.lifecycle import LABEL_RUNS, runs_label
from j2c_server.schedulers.container.spec import runs_root
from j2c_server.wire.api import JobStatus, Stage, StageState
from tests.support.jobs import diary
from tests.support.lab_python import image_request, image_settings, need_lab_packages
from tests.support.lab_python import lab_project as make_lab_project
from tests.support.podman import Podman

TRAIN = "import regex\nimport scipy.stats\nimport numpy as np\nimport helper\n"


@pytest.fixture(autouse=True)
def _lab_python_has_what_the_image_lacks() -> None:
    need_lab_packages()


@pytest.fixture
def lab_project(tmp_path: Path) -> Path:
    hello = "print('hello from the image', flush=True)\n"
    files = {"train.py": TRAIN, "helper.py": "VALUE = 1\n", "hello.py": hello}
    return make_lab_project(tmp_path / "proj", files)


async def test_a_probed_image_names_what_the_lab_base_adds_and_is_probed_once(
    podman: Podman, lab_project: Path, tmp_path: Path
) -> None:
    service = JobService(image_settings(podman, tmp_path / "data"))
    try:
        before = probe.probes_started
        plan = await service.preflight(image_request(lab_project, "train.py"))
        assert probe.probes_started == before + 1
        report = plan.image_report
        assert report is not None and report.known and report.source == "probe"
        assert report.key.startswith("container-id:")
        missing = {m.name: m for m in report.missing}
        assert {"regex", "scipy"} <= set(missing)
        assert missing["regex"].needed_by == ["imported by train.py"]
        assert missing["scipy"].bytes > 10_000_000
        [numpy] = [v for v in report.versions if v.name == "numpy"]
        assert numpy.image_version == "1.24.2"
        assert any(b.by.startswith("scipy ") for b in numpy.broken)
        lines = report_lines(report)
        assert lines[0] == f"image {podman.image} differs from the lab (probed):"
        assert any(
            line.startswith("    regex ") and "imported by train.py" in line for line in lines
        )

        again = await service.preflight(image_request(lab_project, "train.py"))
        assert probe.probes_started == before + 1  # known by the image's ID: no container
        assert again.image_report is not None and again.image_report.key == report.key
    finally:
        await service.stop()


async def test_the_jobs_inventory_is_kept_and_read_by_the_next_preflight(
    podman: Podman, lab_project: Path, tmp_path: Path
) -> None:
    settings = image_settings(podman, tmp_path / "data")
    service = JobService(settings)
    try:
        record = await service.submit(image_request(lab_project, "hello.py"))
        done = await service.wait(record.id)
        events = await service.events(record.id)
        assert done.status == JobStatus.succeeded, [e.text for e in events][-15:]
        scan = next(e for e in events if e.stage == Stage.scan and e.state == StageState.finished)
        report = scan.data["plan"]["image_report"]
        assert {"regex", "scipy"} <= {m["name"] for m in report["missing"]}
        first_upload = next(e.seq for e in events if e.stage == Stage.upload)
        assert scan.seq < first_upload  # said before any upload
        said = diary(events)
        [line] = [t for t in said if t.startswith("j2c: inventory: ")]
        assert line.startswith("j2c: inventory: Python 3.11.2, ") and "kept for image" in line
        kept = InventoryStore(settings.data_path()).get(report["key"])
        assert kept is not None and kept.source == "job"
        assert kept.inventory.j2c_version is not None  # j2c-unpack's own, not a probe's

        before = probe.probes_started
        plan = await service.preflight(image_request(lab_project, "train.py"))
        assert probe.probes_started == before
        assert plan.image_report is not None and plan.image_report.source == "job"
        assert "regex" in {m.name for m in plan.image_report.missing}
    finally:
        await service.stop()


def _engine(podman: Podman) -> httpx.Client:
    return httpx.Client(
        transport=httpx.HTTPTransport(uds=podman.socket), base_url="http://engine/v1.41"
    )


async def test_an_image_without_python_says_why_and_is_not_probed_again(
    podman: Podman, lab_project: Path, tmp_path: Path
) -> None:
    tree = tmp_path / "rootfs"
    (tree / "etc").mkdir(parents=True)
    (tree / "etc" / "hello").write_text("no python here\n")
    archive = tmp_path / "rootfs.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(tree, arcname=".")
    name = f"localhost/j2c-nopython-{os.getpid()}"
    with _engine(podman) as engine:
        made = engine.post(
            "/images/create",
            params={"fromSrc": "-", "repo": name},
            content=archive.read_bytes(),
            headers={"Content-Type": "application/x-tar"},
        )
        assert made.status_code == 200, made.text
    settings = image_settings(podman, tmp_path / "data")
    service = JobService(settings)
    request = image_request(lab_project, "train.py").model_copy(update={"image": f"{name}:latest"})
    try:
        before = probe.probes_started
        for _ in range(2):
            plan = await service.preflight(request)
            report = plan.image_report
            assert report is not None and not report.known
            assert report.message is not None
            assert f"image {name}:latest not known yet (the probe of" in report.message
            assert "could not start its python3" in report.message
            assert report.message.endswith("checked when the job starts")
        assert probe.probes_started == before + 1  # the failure is remembered
        with _engine(podman) as engine:
            # This server's probes (its runs label): the engine is shared with other tests.
            own = ["j2c.probe", f"{LABEL_RUNS}={runs_label(runs_root(settings))}"]
            left = engine.get(
                "/containers/json", params={"all": 1, "filters": json.dumps({"label": own})}
            ).json()
        assert left == []  # the probe container is removed, failed or not
    finally:
        await service.stop()
        with _engine(podman) as engine:
            engine.delete(f"/images/{name}:latest", params={"force": 1})
