"""The inventory script (stdlib only, also a ``python -I -c`` script), the in-job report with the
node cache, the image store and ``j2c image inventory``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from j2c_server.cli import main as cli
from j2c_server.image.store import InventoryStore
from j2c_server.unpack import inventory
from j2c_server.wire.image import ImageInventory
from tests.image.fixtures import inventory as fake_inventory

SCRIPT = Path(inventory.__file__)


def test_the_script_runs_isolated_on_its_own_and_prints_a_valid_inventory() -> None:
    done = subprocess.run(
        [sys.executable, "-I", "-c", SCRIPT.read_text()],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd="/",
    )
    found = ImageInventory.model_validate(json.loads(done.stdout))
    assert found.python.minor == f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert found.python.cache_tag == sys.implementation.cache_tag
    assert found.platform.libc == "glibc" and found.platform.libc_version
    # The base interpreter's site folders: a venv the tests run from is not what a job sees.
    assert found.site_dirs
    assert all(d.startswith(sys.base_prefix) for d in found.site_dirs)
    assert any(d.name == "pip" and d.top_level == ["pip"] for d in found.distributions)


def test_in_a_job_it_is_said_once_per_interpreter_with_a_node_cache(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    inventory.report(cache)
    first = capsys.readouterr().err
    assert first.startswith(inventory.PREFIX)
    said = json.loads(first[len(inventory.PREFIX) :])
    assert ImageInventory.model_validate(said).python.version
    [kept] = (cache / "inventory").iterdir()
    assert json.loads(kept.read_text())["python"] == said["python"]
    assert kept.stat().st_mode & 0o077 == 0
    inventory.report(cache)  # a warm start: found in the cache, nothing computed or said
    assert capsys.readouterr().err == ""
    inventory.report(None)  # no cache: every job says it
    assert capsys.readouterr().err.startswith(inventory.PREFIX)


def test_a_cache_folder_others_can_write_is_not_used_for_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"
    (cache / "inventory").mkdir(parents=True)
    os.chmod(cache / "inventory", 0o777)
    inventory.report(cache)
    inventory.report(cache)
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 2 and all(line.startswith(inventory.PREFIX) for line in said)
    assert list((cache / "inventory").iterdir()) == []


def test_the_store_keeps_one_inventory_per_key_privately_and_misses_bad_files(
    tmp_path: Path,
) -> None:
    store = InventoryStore(tmp_path)
    assert store.get("image:x") is None
    stored = store.put("image:x", fake_inventory({"numpy": "1.24.2"}), "operator")
    again = store.get("image:x")
    assert again is not None and again.source == "operator"
    assert again.inventory.distributions[0].name == "numpy"
    assert again.stored_at == stored.stored_at
    [path] = (tmp_path / "images").iterdir()
    assert path.stat().st_mode & 0o077 == 0 and (tmp_path / "images").stat().st_mode & 0o077 == 0
    assert store.get("image:y") is None
    path.write_text("{not json")
    assert store.get("image:x") is None


def test_j2c_image_inventory_from_a_file_is_what_the_next_preflight_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("J2C_DATA_DIR", str(tmp_path / "data"))
    given = tmp_path / "inv.json"
    given.write_text(json.dumps(fake_inventory({"numpy": "1.24.2"})))
    runner = CliRunner()
    done = runner.invoke(
        cli,
        ["image", "inventory", "reg/img:1", "--from-file", str(given), "--scheduler", "kubernetes"],
    )
    assert done.exit_code == 0, done.output
    assert (
        "kept the inventory of image reg/img:1 (Python 3.11.2, 1 distributions) as image:reg/img:1"
        in done.output
    )
    kept = InventoryStore(tmp_path / "data").get("image:reg/img:1")
    assert kept is not None and kept.source == "operator"

    given.write_text(json.dumps({"python": {"version": "three"}}))
    bad = runner.invoke(
        cli,
        ["image", "inventory", "reg/img:1", "--from-file", str(given), "--scheduler", "kubernetes"],
    )
    assert bad.exit_code != 0 and "is not an inventory" in bad.output
    missing = runner.invoke(
        cli,
        [
            "image",
            "inventory",
            "reg/img:1",
            "--from-file",
            str(tmp_path / "nope.json"),
            "--scheduler",
            "kubernetes",
        ],
    )
    assert missing.exit_code != 0 and "cannot read" in missing.output
    unprobed = runner.invoke(cli, ["image", "inventory", "reg/img:1", "--scheduler", "kubernetes"])
    assert unprobed.exit_code != 0 and "only the container backend can probe" in unprobed.output
    local = runner.invoke(
        cli, ["image", "inventory", "x", "--scheduler", "local", "--from-file", str(given)]
    )
    assert local.exit_code != 0 and "lab's own Python" in local.output


async def test_an_unknown_image_is_said_so_then_an_operators_inventory_is_used(
    tmp_path: Path,
) -> None:
    from j2c_server.cli.render import plan_notes
    from j2c_server.config import load_settings
    from j2c_server.jobs.service import JobService
    from j2c_server.wire.api import JobRequest

    project = tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text("print(1)\n")
    settings = load_settings(environ={}, overrides={"data_dir": str(tmp_path / "data")})
    request = JobRequest(
        code_path=str(project), call_path="train.py", scheduler="kubernetes", image="reg/img:2"
    )
    service = JobService(settings)
    try:
        plan = await service.preflight(request)
        assert plan.image_report is not None and not plan.image_report.known
        assert plan_notes(plan) == ["image reg/img:2 not known yet: checked when the job starts"]
        InventoryStore(settings.data_path()).put(
            "image:reg/img:2", fake_inventory({"numpy": "1.24.2"}, python="3.10.12"), "operator"
        )
        plan = await service.preflight(request)
    finally:
        await service.stop()
    report = plan.image_report
    assert report is not None and report.known and report.source == "operator"
    assert report.missing == [] and report.python is None  # no venv: nothing of the lab's


def test_a_venv_made_for_another_python_minor_is_reported(tmp_path: Path) -> None:
    from j2c_server.image.check import compare_with
    from j2c_server.image.text import report_lines
    from j2c_server.schedulers.base import InventoryTarget as Target

    project = tmp_path / "proj"
    project.mkdir()
    base = Path(getattr(sys, "_base_executable", sys.executable))
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(project / ".venv")], check=True)
    stored = InventoryStore(tmp_path).put("image:x", fake_inventory(python="3.10.12"), "job")
    report = compare_with(
        stored, Target("kubernetes", "image:x", "image x"), project / ".venv", project, []
    )
    minor = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert report.python == (
        f"the venv was made with Python {minor}, the image runs 3.10.12: the venv's packages "
        "will not load"
    )
    assert report_lines(report) == [
        "image x differs from the lab (from a job's log):",
        f"  Python: {report.python}",
    ]
