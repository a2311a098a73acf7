"""The layer of lab-base packages (image/base_layer.py): which ship, their files by RECORD, and the
layer reused across sends like the venv layer.

A hand-made "lab base" site folder stands in for the base interpreter's (laid out as pip does:
package, ``.dist-info`` with RECORD); the packer, the layer cache and the file store are real.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from j2c_server.core.errors import PackError
from j2c_server.core.manifest_plan import READS_FORMAT_VERSION
from j2c_server.core.manifest_plan import LayerRole as PlanRole
from j2c_server.image.base_layer import (
    ShipChoice,
    add_base_layers,
    base_layers_scanned,
    dist_files,
    refuse_if_it_breaks_the_image,
    select,
)
from j2c_server.image.needs import lab_dists
from j2c_server.image.text import shipping_lines
from j2c_server.pack import PackSpec, make_manifest, pack, publish
from j2c_server.storage import open_store
from j2c_server.wire.image import (
    BrokenRequirement,
    ImageInventory,
    InventoryDist,
    InventoryPlatform,
    InventoryPython,
    MissingDist,
    VersionDifference,
)
from j2c_server.wire.manifest import (
    MANIFEST_FORMAT_VERSION,
    MANIFEST_FORMAT_VERSION_SHIPPED_BASE,
    LayerRole,
)
from tests.support.projects import backdate, write


def _dist(site: Path, name: str, version: str, files: dict[str, str], extra: list[str]) -> None:
    """``name`` installed into ``site`` as pip would; ``extra``: more RECORD lines."""
    info = site / f"{name}-{version}.dist-info"
    for rel, text in files.items():
        write(site / rel, text)
    write(info / "METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    write(info / "top_level.txt", f"{name}\n")
    lines = [f"{rel},," for rel in files] + extra + [f"{info.name}/METADATA,,"]
    lines += [f"{info.name}/top_level.txt,,", f"{info.name}/RECORD,,"]
    write(info / "RECORD", "\n".join(lines) + "\n")


@pytest.fixture
def lab_site(tmp_path: Path) -> Path:
    site = tmp_path / "base" / "lib" / "python3.11" / "site-packages"
    _dist(
        site,
        "fakepkg",
        "2.0",
        {"fakepkg/__init__.py": "VALUE = 2\n", "fakepkg/core.py": "X = 1\n"},
        [
            "fakepkg/__pycache__/core.cpython-311.pyc,,",
            "../../../bin/fakecli,,",
            "/etc/fakepkg.conf,,",
        ],
    )
    write(site / "fakepkg" / "__pycache__" / "core.cpython-311.pyc", "bytecode")
    write(site / "fakepkg" / "stray.txt", "not in RECORD\n")
    write(tmp_path / "base" / "bin" / "fakecli", "#!/bin/sh\n")
    _dist(site, "other", "1.0", {"other/__init__.py": ""}, [])
    backdate(tmp_path / "base")
    return site


def _inventory(dists: list[InventoryDist], j2c: str | None = None, reads: int | None = None):
    return ImageInventory(
        python=InventoryPython(version="3.11.2"),
        platform=InventoryPlatform(machine="x86_64", libc="glibc", libc_version="2.36"),
        distributions=dists,
        j2c_version=j2c,
        reads_manifest_format=reads,
    )


def _missing(name: str = "fakepkg") -> MissingDist:
    return MissingDist(name=name, lab_version="2.0", bytes=1, needed_by=["imported by t.py"])


def test_the_layer_holds_the_record_files_inside_site_packages_without_bytecode(
    lab_site: Path,
) -> None:
    base = lab_dists([lab_site])
    found = dist_files(base["fakepkg"])
    assert found.site == lab_site
    assert found.files == (
        "fakepkg-2.0.dist-info/METADATA",
        "fakepkg-2.0.dist-info/RECORD",
        "fakepkg-2.0.dist-info/top_level.txt",
        "fakepkg/__init__.py",
        "fakepkg/core.py",
    )  # no bytecode, no stray file RECORD does not list, nothing of 'other'
    assert found.skipped == ("fakepkg 2.0: ../../../bin/fakecli", "fakepkg 2.0: /etc/fakepkg.conf")
    assert found.bytes == sum(os.path.getsize(lab_site / rel) for rel in found.files)

    shipping = select([_missing()], [], base, _inventory([]), ShipChoice(), has_venv=True)
    assert shipping is not None and shipping.enabled
    assert shipping.names == ["fakepkg 2.0"] and shipping.files == 5
    assert shipping.skipped_files == list(found.skipped)
    [layer] = base_layers_scanned(shipping, base, [lab_site])
    assert layer.role == LayerRole.base and layer.root == lab_site
    assert [e.rel for e in layer.entries] == [
        "fakepkg",
        "fakepkg/__init__.py",
        "fakepkg/core.py",
        "fakepkg-2.0.dist-info",
        "fakepkg-2.0.dist-info/METADATA",
        "fakepkg-2.0.dist-info/RECORD",
        "fakepkg-2.0.dist-info/top_level.txt",
    ]
    lines = shipping_lines(_report(shipping))
    assert lines[0].startswith(
        "  shipping 1 package from the lab's base Python that image X lacks: fakepkg — "
    )
    assert "left out (outside site-packages): fakepkg 2.0: ../../../bin/fakecli" in lines[1]


def _report(shipping, versions=()):  # type: ignore[no-untyped-def]
    from j2c_server.wire.image import ImageReport

    return ImageReport(
        target="image X",
        key="k",
        known=True,
        missing=[_missing()],
        versions=list(versions),
        shipping=shipping,
    )


def test_off_by_the_flag_the_setting_an_old_unpack_or_no_venv_says_why(lab_site: Path) -> None:
    base = lab_dists([lab_site])
    inv = _inventory([])
    off = ShipChoice(enabled=False, off_by="--no-ship-base")
    shipping = select([_missing()], [], base, inv, off, has_venv=True)
    assert shipping is not None and not shipping.enabled and shipping.names == []
    assert shipping.off_reason == "--no-ship-base"
    assert shipping_lines(_report(shipping)) == [
        "  not shipped (--no-ship-base): the job cannot import them (ModuleNotFoundError)"
    ]
    old = select([_missing()], [], base, _inventory([], "0.1.0"), ShipChoice(), has_venv=True)
    assert old is not None and not old.enabled
    assert old.off_reason is not None
    assert old.off_reason.startswith("the image's j2c-unpack (j2c 0.1.0, reads no manifest")
    assert "is too old for shipped base packages (format 4)" in old.off_reason
    new = _inventory([], "0.2.0", READS_FORMAT_VERSION)
    assert select([_missing()], [], base, new, ShipChoice(), has_venv=True).enabled  # type: ignore[union-attr]
    novenv = select([_missing()], [], base, inv, ShipChoice(), has_venv=False)
    assert novenv is not None and novenv.off_reason == "the job has no venv to put them on"


def test_conflicts_follow_the_choice_and_one_that_breaks_the_image_is_refused(
    lab_site: Path,
) -> None:
    _dist(lab_site, "fakenum", "2.0", {"fakenum/__init__.py": ""}, [])
    base = lab_dists([lab_site])
    broken = BrokenRequirement(by="fakepkg 2.0", requirement="fakenum>=1.5")
    diff = VersionDifference(
        name="fakenum", lab_version="2.0", image_version="1.0", broken=[broken]
    )
    image = _inventory(
        [
            InventoryDist(name="fakenum", version="1.0"),
            InventoryDist(name="imgtool", version="3.0", requires=["fakenum<2"]),
        ]
    )

    def chosen(conflicts: str, force: bool = False):  # type: ignore[no-untyped-def]
        choice = ShipChoice(conflicts=conflicts, force=force)  # type: ignore[arg-type]
        return select([_missing()], [diff], base, image, choice, has_venv=True)

    auto = chosen("auto")  # the image's 1.0 fails fakepkg's requirement: the lab's ships
    assert auto.names == ["fakepkg 2.0", "fakenum 2.0"]
    assert auto.shipped_conflicts == ["fakenum 2.0"]
    assert [b.model_dump() for b in auto.breaks_image] == [
        {"by": "imgtool 3.0", "requirement": "fakenum<2"}
    ]
    with pytest.raises(PackError) as refused:
        refuse_if_it_breaks_the_image(auto)
    assert refused.value.field == "base_conflicts"
    assert "would break the image's own packages: imgtool 3.0 needs fakenum<2" in str(refused.value)
    refuse_if_it_breaks_the_image(chosen("auto", force=True))  # confirmed: no error
    with pytest.raises(PackError) as too_big:  # past pack.hard_limit_mb with the base
        refuse_if_it_breaks_the_image(chosen("auto", force=True), 1000, 1000)
    assert too_big.value.field == "ship_base"
    assert "the lab's base packages the image lacks (" in str(too_big.value)
    assert "past the hard limit of 1.0 kB" in str(too_big.value)
    lines = shipping_lines(_report(auto, [diff]))
    assert (
        "  fakenum: ship the lab's 2.0 (--base-conflicts ship) or use the image's 1.0 "
        "(--base-conflicts image); now the lab's (auto)"
    ) in lines
    assert (
        "  error: the lab's version breaks the image's own packages: imgtool 3.0 needs fakenum<2"
    ) in lines

    kept = chosen("image")
    assert kept.names == ["fakepkg 2.0"] and kept.image_conflicts == ["fakenum 1.0"]
    assert kept.breaks_image == []
    refuse_if_it_breaks_the_image(kept)
    plain = diff.model_copy(update={"broken": []})
    auto_plain = select([_missing()], [plain], base, image, ShipChoice(), has_venv=True)
    assert auto_plain is not None and auto_plain.names == ["fakepkg 2.0"]  # nothing needs 2.0
    shipped = select([_missing()], [plain], base, image, ShipChoice(conflicts="ship"), True)
    assert shipped is not None and "fakenum 2.0" in shipped.names


def test_the_base_layer_is_reused_across_sends_and_uploaded_once(
    lab_site: Path, project: Path, venv: Path, tmp_path: Path
) -> None:
    base = lab_dists([lab_site])
    shipping = select([_missing()], [], base, _inventory([]), ShipChoice(), has_venv=True)
    spec = PackSpec(code_path=project, call_path="train.py", venv_path=venv)
    store = open_store((tmp_path / "store").as_uri())
    sent = []
    for _ in range(2):
        result = pack(spec, tmp_path / "cache")
        result = add_base_layers(result, shipping, spec, tmp_path / "cache", (base, [lab_site]))
        manifest = make_manifest(result)
        assert manifest.format_version == MANIFEST_FORMAT_VERSION_SHIPPED_BASE == 4
        [layer] = manifest.base_layers()
        assert layer.source_path == str(lab_site) and layer.files == 7
        sent.append((result, asyncio.run(publish(store, result, manifest))))
    (_, one), (second, two) = sent
    assert LayerRole.base in one.uploaded
    assert [p.reused for p in second.layers if p.layer.role == LayerRole.base] == [True]
    assert LayerRole.base in two.already_present and LayerRole.base not in two.uploaded
    assert make_manifest(pack(spec, tmp_path / "cache")).format_version < 4  # none: as before


def test_the_layer_roles_and_format_versions_agree() -> None:
    assert [r.value for r in PlanRole] == [r.value for r in LayerRole] == ["code", "venv", "base"]
    assert READS_FORMAT_VERSION == MANIFEST_FORMAT_VERSION


def test_files_in_another_site_folder_of_the_base_ship_in_that_folders_layer(
    tmp_path: Path,
) -> None:
    # purelib and platlib apart (lib and lib64, as some distributions' Pythons have them).
    purelib = tmp_path / "base" / "lib" / "python3.11" / "site-packages"
    platlib = tmp_path / "base" / "lib64" / "python3.11" / "site-packages"
    write(platlib / "splitpkg_ext.so", "binary")
    _dist(
        purelib,
        "splitpkg",
        "1.0",
        {"splitpkg/__init__.py": "from splitpkg_ext import *\n"},
        ["../../../lib64/python3.11/site-packages/splitpkg_ext.so,,"],
    )
    backdate(tmp_path / "base")
    folders = [purelib, platlib]
    base = lab_dists(folders)
    missing = [_missing("splitpkg").model_copy(update={"lab_version": "1.0"})]
    shipping = select(missing, [], base, _inventory([]), ShipChoice(), True, folders)
    assert shipping is not None and shipping.skipped_files == [] and shipping.files == 5
    pure, plat = base_layers_scanned(shipping, base, folders)
    assert (pure.root, plat.root) == (purelib, platlib)
    assert [e.rel for e in plat.entries] == ["splitpkg_ext.so"]
    alone = select(missing, [], base, _inventory([]), ShipChoice(), True)  # folders unknown
    assert alone is not None and alone.skipped_files == [
        "splitpkg 1.0: ../../../lib64/python3.11/site-packages/splitpkg_ext.so"
    ]
