"""Shipped lab-base packages on the node (unpack/base_packages.py): a real packed project + venv +
base layer in a file store, run by a real ``j2c-unpack`` subprocess at original paths, relocated,
and through the node cache (cold, then warm and in place). The job imports the shipped package
from ``<venv>/j2c-base``, which sits on ``sys.path`` after the venv's site-packages and before
the base interpreter's. An older j2c-unpack (one that reads up to format 3) refuses the manifest.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from j2c_server.image.base_layer import ShipChoice, add_base_layers, select
from j2c_server.image.needs import lab_dists
from j2c_server.pack import PackSpec, make_manifest, pack, publish
from j2c_server.storage import open_store
from j2c_server.wire.image import ImageInventory, InventoryPlatform, InventoryPython, MissingDist
from tests.pack.test_base_layer import _dist
from tests.support.projects import backdate, make_venv, write
from tests.unpack.helpers import UNPACK, run_unpack

SHOW = """\
import json, sys, sysconfig
import fakepkg, tinypkg
print("J2C-TEST " + json.dumps({"fakepkg": fakepkg.__file__, "value": fakepkg.VALUE,
    "path": sys.path, "base_site": sysconfig.get_paths(vars={"base": sys.base_prefix,
    "platbase": sys.base_prefix})["purelib"]}), flush=True)
"""


def _published(tmp_path: Path) -> tuple[str, Path]:
    """The manifest URI of a project + venv + base layer, and the lab folder (moved away after
    packing, so that the original paths are free on this machine)."""
    lab = tmp_path / "lab"
    project = lab / "project"
    write(project / "show.py", SHOW)
    venv = make_venv(lab / "venv")
    site = tmp_path / "base" / "lib" / "python3.11" / "site-packages"
    _dist(site, "fakepkg", "2.0", {"fakepkg/__init__.py": "VALUE = 2\n"}, [])
    # A name this interpreter has too (its base holds packaging): the shipped copy shadows it.
    _dist(site, "packaging", "99.0", {"packaging/__init__.py": ""}, [])
    backdate(tmp_path / "base")
    backdate(project)
    base = lab_dists([site])
    inventory = ImageInventory(
        python=InventoryPython(version="3.11.2"), platform=InventoryPlatform(machine="x86_64")
    )
    missing = [
        MissingDist(name=name, lab_version=version, bytes=10, needed_by=["show.py"])
        for name, version in (("fakepkg", "2.0"), ("packaging", "99.0"))
    ]
    shipping = select(missing, [], base, inventory, ShipChoice(), has_venv=True)
    spec = PackSpec(code_path=project, call_path="show.py", venv_path=venv)
    result = pack(spec, tmp_path / "cache")
    result = add_base_layers(result, shipping, spec, tmp_path / "cache", (base, [site]))
    manifest = make_manifest(result)
    store = open_store((tmp_path / "store").as_uri())
    uri = asyncio.run(publish(store, result, manifest)).manifest_uri
    shutil.rmtree(tmp_path / "base")  # the node has no lab base: only what was shipped
    return uri, lab


def _said(proc: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert proc.returncode == 0, proc.stderr[-3000:]
    [line] = [x for x in proc.stdout.splitlines() if x.startswith("J2C-TEST ")]
    return dict(json.loads(line[len("J2C-TEST ") :]))


def _check_order(said: dict[str, object], venv: str) -> None:
    path = [str(p) for p in said["path"]]  # type: ignore[attr-defined]
    fakepkg = str(said["fakepkg"])
    assert fakepkg.endswith("/j2c-base/fakepkg/__init__.py") and said["value"] == 2
    base_folder = fakepkg.removesuffix("/fakepkg/__init__.py")
    assert base_folder.startswith(venv), (base_folder, venv)
    venv_site = next(i for i, p in enumerate(path) if p.endswith("site-packages") and venv in p)
    shipped = path.index(base_folder)
    image_site = path.index(str(said["base_site"]))
    assert venv_site < shipped < image_site


@pytest.mark.parametrize("mode", ["original", "relocate"])
def test_the_job_imports_the_shipped_package_after_the_venvs_own(tmp_path: Path, mode: str) -> None:
    uri, lab = _published(tmp_path)
    moved = lab.rename(tmp_path / "lab-away")
    workdir = tmp_path / "work"
    proc = run_unpack(uri, "--paths", mode, "--workdir", str(workdir))
    said = _said(proc)
    assert "base layer: " in proc.stderr and "after the venv's own" in proc.stderr
    assert "j2c: python: the shipped packaging 99.0 (from the lab's base) shadows the image's " in (
        proc.stderr
    )
    venv = str(lab / "venv") if mode == "original" else str(workdir / "venv")
    _check_order(said, venv)
    assert moved.exists()


def test_through_the_node_cache_cold_then_warm_in_place(tmp_path: Path) -> None:
    uri, lab = _published(tmp_path)
    lab.rename(tmp_path / "lab-away")
    cache = tmp_path / "node-cache"
    for run in range(2):
        workdir = tmp_path / f"work{run}"
        options = ["--paths", "relocate", "--workdir", str(workdir), "--cache-dir", str(cache)]
        proc = run_unpack(uri, *options)
        said = _said(proc)
        assert "venv used in place at " in proc.stderr, proc.stderr[-2000:]
        _check_order(said, str(cache / "entries"))
    assert "2 of 2 layers from the cache, 0 built" in proc.stderr  # the base is in the venv's
    [summary] = [x for x in proc.stderr.splitlines() if x.startswith("j2c: summary: ")]
    layers = json.loads(Path(uri.removeprefix("file://")).read_text())["layers"]
    reused = json.loads(summary.removeprefix("j2c: summary: "))["bytes_reused"]
    assert reused == sum(layer["size"] for layer in layers)  # the base layer's bytes included
    proc = run_unpack(uri, "--workdir", str(tmp_path / "work-orig"), "--cache-dir", str(cache))
    _check_order(_said(proc), str(lab / "venv"))  # original paths: linked into the venv's home


def test_an_older_j2c_unpack_refuses_the_manifest_with_a_clear_message(tmp_path: Path) -> None:
    uri, _ = _published(tmp_path)
    # The reader as it was before format 4 (it read up to 3): the same check, the older number.
    older = (
        "import sys; import j2c_server.wire.manifest as m; m.MANIFEST_FORMAT_VERSION = 3; "
        "from j2c_server.unpack.__main__ import main; sys.exit(main())"
    )
    proc = subprocess.run(
        [sys.executable, "-c", older, uri, "--paths", "relocate"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 65, proc.stderr
    assert "the manifest has format version 4; this j2c-unpack reads up to 3" in proc.stderr
    assert UNPACK  # the real one reads it (the tests above)
