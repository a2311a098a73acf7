"""The notebook runner's needs (nbclient, ipykernel) checked before anything is uploaded: named
when the venv and the Python under it lack them, silent when the venv has them, and for a
script never asked."""

from __future__ import annotations

from pathlib import Path

from j2c_server.config import load_settings
from j2c_server.image.runner import NOTEBOOK_RUNNER_NEEDS, runner_needs, runner_warning
from j2c_server.jobs.service import JobService
from j2c_server.unpack import notebook
from j2c_server.wire.api import JobRequest
from j2c_server.wire.image import ImageReport
from tests.support.projects import make_venv, write


def test_the_runners_needs_are_the_notebook_runners_own() -> None:
    assert NOTEBOOK_RUNNER_NEEDS == notebook.RUNNER_NEEDS  # it imports nothing of j2c
    assert runner_needs("explore.ipynb") == ("nbclient", "ipykernel")
    assert runner_needs("train.py") == () and runner_needs("-m pkg") == ()


def test_a_venv_without_them_on_a_python_without_them_is_named(tmp_path: Path) -> None:
    # make_venv's base interpreter (the platform's) has neither.
    venv = make_venv(tmp_path / "venv")
    warning = runner_warning(NOTEBOOK_RUNNER_NEEDS, venv, None, None)
    assert warning is not None and warning.code == "notebook_runner"
    assert warning.path == "venv_path"
    assert "lack nbclient and ipykernel" in warning.message
    assert "pip install nbclient ipykernel" in warning.message


def test_a_venv_with_them_is_fine(tmp_path: Path) -> None:
    venv = make_venv(tmp_path / "venv", packages={"nbclient": "0.10.2", "ipykernel": "6.29.5"})
    assert runner_warning(NOTEBOOK_RUNNER_NEEDS, venv, None, None) is None


def test_for_an_image_not_known_yet_it_names_what_the_venv_lacks(tmp_path: Path) -> None:
    venv = make_venv(tmp_path / "venv", packages={"nbclient": "0.10.2"})
    report = ImageReport(target="image lab:1", key="k", known=False)
    warning = runner_warning(NOTEBOOK_RUNNER_NEEDS, venv, report, None)
    assert warning is not None
    assert "the venv lacks (image lab:1 is not known yet" in warning.message
    assert warning.message.split("has) ")[1].startswith("ipykernel:")


async def test_the_preflight_of_a_notebook_says_so_before_anything_is_sent(
    j2c_data_dir: Path, tmp_path: Path
) -> None:
    project = tmp_path / "proj"
    write(
        project / "explore.ipynb",
        '{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}',
    )
    write(project / "train.py", "print('hi')\n")
    venv = make_venv(tmp_path / "venv")
    service = JobService(load_settings())
    try:
        for entry, warned in (("explore.ipynb", True), ("train.py", False)):
            request = JobRequest(code_path=str(project), call_path=entry, venv_path=str(venv))
            plan = await service.preflight(request)
            codes = [warning.code for warning in plan.warnings]
            assert ("notebook_runner" in codes) == warned, (entry, plan.warnings)
    finally:
        await service.stop()
