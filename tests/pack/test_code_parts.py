"""The code layer in parts (``pack.code_part_kb``): content-defined boundaries, so an edit re-packs
one part and an added or removed file at most two; each part holds the folders it needs; a
project that fits in one part keeps its manifest byte for byte. Real packer, real ``file://``
store."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from j2c_server.config import PackSettings
from j2c_server.pack import PackResult, PackSpec, make_manifest, pack, publish
from j2c_server.pack.plan import prepare
from j2c_server.pack.scan import DIR, FILE, Entry
from j2c_server.storage import open_store
from j2c_server.storage.base import blob_key
from j2c_server.wire.manifest import LayerRole, Manifest
from tests.pack.archives import members, names
from tests.support.projects import OLD_MTIME, backdate

KIB = 1024
MIB = 1024 * KIB
PART = 64 * KIB


def source(number: int) -> str:
    """A module of 3-9 kB that compresses like code (lines differ)."""
    lines = [
        f"def f{number}_{i}(x):\n    return x * {i} + {number}  # {i * number}\n"
        for i in range(40 + number % 90)
    ]
    return "".join(lines)


@pytest.fixture
def many(project: Path) -> Path:
    """The sample project plus ~900 kB of small modules in nested packages."""
    for number in range(150):
        folder = project / "pkg" / f"sub{number // 25}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"mod{number:03}.py").write_text(source(number))
    (project / "pkg" / "sub2").chmod(0o750)
    backdate(project)
    return project


@pytest.fixture
def parts_spec(spec: PackSpec, many: Path) -> PackSpec:
    return spec.model_copy(update={"code_path": many, "code_part_bytes": PART})


def digests(result: PackResult) -> list[str]:
    return [packed.layer.digest for packed in result.code_parts()]


def touch_later(path: Path, seconds: int = 5) -> None:
    os.utime(path, (OLD_MTIME + seconds, OLD_MTIME + seconds))


def test_the_setting_reaches_the_spec() -> None:
    spec = PackSpec.from_settings(PackSettings(code_part_kb=64), code_path=".", call_path="x")
    assert spec.code_part_bytes == 64 * KIB
    assert PackSettings().code_part_kb == 256
    assert PackSpec(code_path=".", call_path="x").code_part_bytes == 256 * KIB


def test_the_small_files_are_split_into_parts_holding_each_file_once(
    parts_spec: PackSpec, cache: Path
) -> None:
    result = pack(parts_spec, cache)
    parts = result.code_parts()
    assert 5 <= len(parts) <= 40, len(parts)
    seen: list[str] = []
    for packed in parts:
        held = members(packed.path)
        files = [name for name, member in held.items() if member.isreg()]
        seen += files
        for name in files:  # every folder the part's files need comes with the part
            parent = name.rpartition("/")[0]
            while parent:
                assert held[parent].isdir(), (name, parent)
                parent = parent.rpartition("/")[0]
        if "pkg/sub2" in held:
            assert held["pkg/sub2"].mode & 0o777 == 0o750
        assert packed.layer.unpacked_size == sum(m.size for m in held.values() if m.isreg())
        assert packed.layer.unpacked_size <= 4 * PART + 10 * KIB  # the cap
    scanned = [entry.rel for entry in prepare(parts_spec).layers[0].files]
    assert len(scanned) > 150
    assert sorted(seen) == sorted(scanned)  # each file in exactly one part
    assert len({p.layer.source_path for p in parts}) == 1
    assert result.layer(LayerRole.venv) is not None


def test_an_edit_changes_exactly_one_part(parts_spec: PackSpec, many: Path, cache: Path) -> None:
    first = pack(parts_spec, cache)
    edited = many / "pkg" / "sub3" / "mod080.py"
    saved = edited.with_name(".mod080.py~")  # saved by a rename, as JupyterLab saves
    saved.write_text(edited.read_text() + "# one more line\n")
    os.replace(saved, edited)
    touch_later(edited)
    assert os.stat(edited.parent).st_mtime > OLD_MTIME + 100  # its folder's mtime moved
    second = pack(parts_spec, cache)
    changed = [d for d in digests(second) if d not in digests(first)]
    assert len(changed) == 1 and len(digests(second)) == len(digests(first))
    assert [p.reused for p in second.code_parts()].count(False) == 1
    [new] = [p for p in second.code_parts() if not p.reused]
    assert "pkg/sub3/mod080.py" in names(new.path)


@pytest.mark.parametrize("number", [7, 61, 112, 149])
def test_adding_or_removing_a_file_changes_at_most_two_parts(
    parts_spec: PackSpec, many: Path, cache: Path, number: int
) -> None:
    first = pack(parts_spec, cache)
    added = many / "pkg" / f"sub{number // 25}" / f"mod{number:03}a.py"
    added.write_text(source(number + 1000))
    touch_later(added)
    touch_later(added.parent)
    second = pack(parts_spec, cache)
    assert len([d for d in digests(second) if d not in digests(first)]) <= 2
    added.unlink()
    removed = many / "pkg" / f"sub{(number + 3) // 25 % 6}" / f"mod{(number + 3) % 150:03}.py"
    removed.unlink()
    touch_later(removed.parent, 9)
    touch_later(added.parent, 9)
    third = pack(parts_spec, cache)
    assert len([d for d in digests(third) if d not in digests(first)]) <= 2


def test_an_unchanged_project_reuses_every_part_without_reading(
    parts_spec: PackSpec, many: Path, cache: Path
) -> None:
    first = pack(parts_spec, cache)
    again = pack(parts_spec, cache)
    assert digests(again) == digests(first) and all(p.reused for p in again.code_parts())


def test_a_project_that_fits_in_one_part_keeps_its_manifest(spec: PackSpec, cache: Path) -> None:
    one = pack(spec, cache)  # the sample project: well under the default 256 kB
    assert len(one.code_parts()) == 1
    before = make_manifest(
        pack(spec.model_copy(update={"code_part_bytes": 0}), cache), created_at=1.0
    )
    after = make_manifest(one, created_at=1.0)
    assert after.canonical_json() == before.canonical_json() and after.format_version == 1


def test_several_parts_make_format_version_3_with_big_files_too(
    parts_spec: PackSpec, many: Path, cache: Path
) -> None:
    (many / "data" / "weights.bin").write_bytes(os.urandom(2 * MIB))
    backdate(many)
    result = pack(parts_spec.model_copy(update={"big_file_bytes": MIB}), cache)
    manifest = make_manifest(result, created_at=1.0)
    assert manifest.format_version == 3
    assert [layer.digest for layer in manifest.code_layers()] == digests(result)
    assert manifest.layer(LayerRole.code) == manifest.code_layers()[0]
    assert manifest.files is not None and [f.path for f in manifest.files] == ["data/weights.bin"]
    assert all("data/weights.bin" not in names(p.path) for p in result.code_parts())
    assert Manifest.model_validate_json(manifest.canonical_json()) == manifest


def test_the_split_is_content_defined_and_capped() -> None:
    from j2c_server.pack.parts import split_entries  # here: the module is new

    def entries(sizes: dict[str, int]) -> list[Entry]:
        found: list[Entry] = [Entry("a", DIR, 0o755, 0, 0)]
        found += [Entry(f"a/{name}", FILE, 0o644, size, 0) for name, size in sorted(sizes.items())]
        return found

    sizes = {f"{n:04}.py": 3000 + (n * 37) % 5000 for n in range(400)}
    parts = split_entries(entries(sizes), 32 * KIB)
    assert len(parts) > 10
    assert all(p[0].rel == "a" for p in parts)  # each part brings its folder
    # Same paths, other sizes within their power-of-two bucket: the same boundaries.
    wiggled = {
        name: size + 1 if size + 512 + 1 < 1 << (size + 511).bit_length() else size
        for name, size in sizes.items()
    }
    again = split_entries(entries(wiggled), 32 * KIB)
    assert [[e.rel for e in p] for p in again] == [[e.rel for e in p] for p in parts]
    # Files whose hash never ends a part are still cut at 4 x the target.
    huge = split_entries(entries({f"{n:04}.py": 60 * KIB for n in range(50)}), 16 * KIB)
    assert all(sum(e.size for e in p) <= 4 * 16 * KIB + 60 * KIB for p in huge)
    assert split_entries(entries(sizes), 0) == [entries(sizes)]


async def test_an_edit_uploads_only_its_part(
    parts_spec: PackSpec, many: Path, cache: Path, tmp_path: Path
) -> None:
    store = open_store((tmp_path / "store").as_uri())
    first = pack(parts_spec, cache)
    await publish(store, first, make_manifest(first))
    edited = many / "pkg" / "sub0" / "mod003.py"
    edited.write_text(edited.read_text().replace("return x", "return -x", 1))
    touch_later(edited)
    second = pack(parts_spec, cache)
    published = await publish(store, second, make_manifest(second))
    [new] = [p for p in second.code_parts() if not p.reused]
    assert published.uploaded == [LayerRole.code]
    assert published.manifest_uploaded  # a new manifest, counted with the part
    assert published.bytes_uploaded == new.layer.size + published.manifest_size
    assert new.layer.size < PART
    assert await store.size(blob_key(new.layer.digest)) == new.layer.size
    blobs = list((tmp_path / "store" / "blobs" / "sha256").glob("*.tar.zst"))
    assert len(blobs) == len(first.layers) + 1


def test_the_manifest_of_parts_keeps_its_digest(parts_spec: PackSpec, cache: Path) -> None:
    a = make_manifest(pack(parts_spec, cache), created_at=1.0)
    b = make_manifest(pack(parts_spec, cache), created_at=1.0)
    assert a.digest() == b.digest()
    body = json.loads(a.canonical_json())
    assert [layer["role"] for layer in body["layers"]].count("code") == len(a.code_layers()) > 1
    for layer in a.code_layers():  # each part a blob named by its own sha256
        blob = cache / "blobs" / f"{layer.digest.partition(':')[2]}.tar.zst"
        assert hashlib.sha256(blob.read_bytes()).hexdigest() == layer.digest.partition(":")[2]


def test_the_stage_text_says_parts_in_one_line() -> None:
    from j2c_server.jobs.stage_text import describe
    from j2c_server.wire.api import Stage, StageState

    def part(number: int, outcome: str, **more: object) -> dict[str, object]:
        return {
            "role": "code",
            "size": 14_000,
            "files": 9,
            "outcome": outcome,
            "part": number,
            "parts": 3,
            "changed_since": "j1",
            "reused_from": "j1",
            **more,
        }

    venv = {"role": "venv", "outcome": "reused", "reused_from": "j0"}
    data = {"layers": [part(1, "reused"), part(2, "packed"), part(3, "reused"), venv]}
    assert describe(Stage.pack, StageState.finished, data) == (
        "code layer: 1 of 3 parts packed (14.0 kB), 2 reused (changed since job j1); "
        "venv layer reused: unchanged since job j0"
    )
    reused = {"layers": [part(n, "reused") for n in (1, 2, 3)]}
    assert describe(Stage.pack, StageState.reused, reused) == (
        "code layer reused: 3 parts unchanged since job j1"
    )
    first = [part(n, "packed", changed_since=None) for n in (1, 2, 3)]
    assert describe(Stage.pack, StageState.finished, {"layers": first}) == (
        "code layer: 3 of 3 parts packed (42.0 kB), 0 reused (first pack of this project)"
    )
    upload = {
        "uploaded": ["code"],
        "already_present": ["code", "code", "venv"],
        "bytes_uploaded": 14_000,
    }
    assert describe(Stage.upload, StageState.finished, upload) == (
        "uploaded code layer (1 of 3 parts) (14.0 kB); venv layer already in the store"
    )
