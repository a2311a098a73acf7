"""The imports a first send gets wrong (#48 b, d), against a real podman and the platform image,
from a lab on this machine's own Python (regex in its base, not in the image):

- a package's module named like a dependency (``tok/regex.py`` doing ``import regex``) no
  longer hides the dependency: only names importable at the job's import roots are the
  project's own; the report names regex before upload and the job runs (regex ships);
- a module at the project root named like a dependency still is the project's own;
- an import nothing provides (not in the venv, the lab's base or the image) is named before
  upload and the send refused, unless allowed; an optional one (in try/except ImportError)
  and one only a test file imports stay quiet.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from j2c_server.core.errors import InvalidInput
from j2c_server.image.text import report_lines
from j2c_server.jobs.service import JobService
from j2c_server.wire.api import EventKind, JobStatus
from tests.support.jobs import settle
from tests.support.lab_python import image_request, image_settings, lab_venv, need_lab_packages
from tests.support.podman import Podman


@pytest.fixture(autouse=True)
def _lab_python_has_what_the_image_lacks() -> None:
    need_lab_packages()


def _project(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    lab_venv(root)
    settle(root)
    return root


TOKENIZER = {
    "run.py": "from tok import regex as tokens\nprint('tokens', tokens.split('a b'), flush=True)\n",
    "tok/__init__.py": "",
    "tok/regex.py": "import regex as re\n\ndef split(text):\n    return re.split(r'\\s+', text)\n",
}


async def test_a_module_named_like_a_dependency_no_longer_hides_it(
    podman: Podman, tmp_path: Path
) -> None:
    project = _project(tmp_path / "proj", TOKENIZER)
    service = JobService(image_settings(podman, tmp_path / "data"))
    request = image_request(project, "run.py")
    try:
        report = (await service.preflight(request)).image_report
        assert report is not None and report.known
        assert "regex" in [m.name for m in report.missing], report_lines(report)
        assert [m.needed_by for m in report.missing if m.name == "regex"] == [
            ["imported by tok/regex.py"]
        ]
        record = await service.submit(request)
        done = await service.wait(record.id)
        logs = [e.text or "" for e in await service.events(record.id) if e.kind == EventKind.log]
        assert done.status == JobStatus.succeeded, logs[-15:]
        assert "tokens ['a', 'b']" in logs
    finally:
        await service.stop()


async def test_a_root_module_named_like_a_dependency_is_the_projects_own(
    podman: Podman, tmp_path: Path
) -> None:
    project = _project(
        tmp_path / "proj",
        {"run.py": "import regex\nprint(regex.MINE)\n", "regex.py": "MINE = 1\n"},
    )
    service = JobService(image_settings(podman, tmp_path / "data"))
    try:
        report = (await service.preflight(image_request(project, "run.py"))).image_report
        assert report is not None and report.known
        assert "regex" not in [m.name for m in report.missing]
        assert not report.unprovided
    finally:
        await service.stop()


MISSING = {
    "train.py": (
        "import helpers\n"
        "try:\n    import wandb_not_here\nexcept ImportError:\n    wandb_not_here = None\n"
        "print('trained', helpers.X, flush=True)\n"
    ),
    "helpers.py": "import tiktoken_not_anywhere\nX = 1\n",
    "tests/test_train.py": "import pytest_plugin_not_anywhere\n",
}


async def test_an_import_nothing_provides_is_named_before_upload_and_refused_unless_allowed(
    podman: Podman, tmp_path: Path
) -> None:
    project = _project(tmp_path / "proj", MISSING)
    service = JobService(image_settings(podman, tmp_path / "data"))
    request = image_request(project, "train.py")
    try:
        report = (await service.preflight(request)).image_report
        assert report is not None and report.known
        assert [(u.name, u.imported_by) for u in report.unprovided] == [
            ("tiktoken_not_anywhere", ["helpers.py"])
        ]
        assert (
            f"  helpers.py imports tiktoken_not_anywhere: not in the venv, the lab or "
            f"image {podman.image}" in report_lines(report)
        )
        record = await service.submit(request)
        done = await service.wait(record.id)
        assert done.status == JobStatus.failed
        assert "helpers.py imports tiktoken_not_anywhere" in (done.message or "")
        assert done.handle is None and "upload" not in done.stages  # nothing went up
        allowed = request.model_copy(update={"allow_missing_imports": True})
        again = await service.wait((await service.submit(allowed)).id)
        assert again.status == JobStatus.failed and again.exit_code == 1  # it ran, and died
    finally:
        await service.stop()


def test_the_refusal_says_what_to_do() -> None:
    from j2c_server.jobs.send.inputs import refuse_missing_imports
    from j2c_server.wire.api import JobRequest
    from j2c_server.wire.image import ImageReport, UnprovidedImport

    report = ImageReport(
        target="image x",
        key="image:x",
        known=True,
        unprovided=[UnprovidedImport(name="torch", imported_by=["makemore.py"])],
    )
    request = JobRequest(code_path="/p", call_path="makemore.py")
    with pytest.raises(InvalidInput) as refused:
        refuse_missing_imports(report, request)
    assert str(refused.value.message).startswith(
        "makemore.py imports torch: not in the venv, the lab or image x"
    )
    assert "--allow-missing-imports" in (refused.value.hint or "")
    refuse_missing_imports(report, request.model_copy(update={"allow_missing_imports": True}))
