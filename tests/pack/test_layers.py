"""The layer archives: well-formed tar.zst that standard readers extract faithfully."""

from __future__ import annotations

import hashlib
import os
import subprocess
import tracemalloc
from pathlib import Path

import pytest

from j2c_server.pack import PackSpec, pack
from j2c_server.pack.ignore import CodeRules
from j2c_server.pack.scan import scan_code
from j2c_server.pack.tarwriter import write_layer
from j2c_server.wire.manifest import LayerRole
from tests.pack.archives import members, names, open_layer, read
from tests.support.projects import OLD_MTIME, make_project, write


def code_blob(spec: PackSpec, cache: Path) -> Path:
    layer = pack(spec, cache).layer(LayerRole.code)
    assert layer is not None
    return layer.path


def test_blob_is_named_by_the_sha256_of_its_bytes(spec: PackSpec, cache: Path) -> None:
    for packed in pack(spec, cache).layers:
        digest = "sha256:" + hashlib.sha256(packed.path.read_bytes()).hexdigest()
        assert packed.layer.digest == digest
        assert packed.layer.size == packed.path.stat().st_size
        assert packed.path.name == digest.removeprefix("sha256:") + ".tar.zst"


def test_entries_are_relative_to_the_layer_root(spec: PackSpec, cache: Path) -> None:
    for packed in pack(spec, cache).layers:
        for name in names(packed.path):
            assert not name.startswith("/") and ".." not in name.split("/")


def test_modes_and_mtimes_are_kept(spec: PackSpec, project: Path, cache: Path) -> None:
    (project / "train.py").chmod(0o750)
    os.utime(project / "train.py", (OLD_MTIME, OLD_MTIME + 42))
    member = members(code_blob(spec, cache))["train.py"]
    assert member.mode == 0o750
    assert member.mtime == OLD_MTIME + 42
    assert (member.uid, member.gid) == (0, 0)


def test_contents_round_trip(spec: PackSpec, project: Path, cache: Path) -> None:
    blob = code_blob(spec, cache)
    assert read(blob, "data/train.csv") == (project / "data" / "train.csv").read_bytes()
    assert read(blob, "analysis.ipynb") == (project / "analysis.ipynb").read_bytes()


def test_entry_order_is_sorted_depth_first(spec: PackSpec, cache: Path) -> None:
    shipped = names(code_blob(spec, cache))
    assert shipped.index("mypkg") < shipped.index("mypkg/__init__.py") < shipped.index("train.py")


def test_names_with_spaces_non_ascii_and_long_paths(
    spec: PackSpec, project: Path, cache: Path, tmp_path: Path
) -> None:
    odd = [
        "my data/results 2024.csv",
        "données/été/naïve.py",
        "模型/权重.txt",
        "/".join(["deep-folder-name"] * 12) + "/file.txt",  # > 155 + 100: needs pax
        "x" * 99 + "/" + "y" * 99,  # fits ustar's prefix + name split
    ]
    for rel in odd:
        write(project / rel, f"content of {rel}\n")
    os.symlink("données/été/naïve.py", project / "lien é")
    blob = code_blob(spec, cache)
    shipped = names(blob)
    for rel in odd:
        assert rel in shipped
        assert read(blob, rel) == f"content of {rel}\n".encode()
    assert members(blob)["lien é"].linkname == "données/été/naïve.py"
    # GNU tar, an independent implementation, extracts the same tree.
    out = tmp_path / "extracted"
    out.mkdir()
    subprocess.run(f"zstd -dc '{blob}' | tar -xf - -C '{out}'", shell=True, check=True)
    for rel in odd:
        assert (out / rel).read_text() == f"content of {rel}\n"


def test_empty_and_block_sized_files(spec: PackSpec, project: Path, cache: Path) -> None:
    write(project / "empty.txt", "")
    write(project / "block.bin", "b" * 512)
    blob = code_blob(spec, cache)
    assert read(blob, "empty.txt") == b""
    assert read(blob, "block.bin") == b"b" * 512


def test_file_that_changes_or_vanishes_while_packed_keeps_the_archive_well_formed(
    project: Path, tmp_path: Path
) -> None:
    scanned = scan_code(project, CodeRules([], []), None)
    with (project / "data" / "train.csv").open("a") as grown:
        grown.write("appended after the scan\n")
    (project / "train.py").write_text("")  # shrunk to nothing after the scan
    (project / "mypkg" / "__main__.py").unlink()  # gone after the scan
    blob = tmp_path / "layer.tar.zst"
    with blob.open("wb") as out:
        written = write_layer(str(project), scanned.entries, out, level=3, threads=1)
    assert sorted(written.stats.changed) == ["data/train.csv", "mypkg/__main__.py", "train.py"]
    with open_layer(blob) as archive:
        train = archive.getmember("train.py")
        handle = archive.extractfile(train)
        assert handle is not None and handle.read() == bytes(train.size)
        assert "mypkg/model.py" in archive.getnames()  # entries after them are intact


def test_large_file_is_streamed_with_bounded_memory(tmp_path: Path) -> None:
    project = make_project(tmp_path / "big", secrets=False)
    with (project / "data" / "huge.bin").open("wb") as huge:
        huge.truncate(256 * 1024 * 1024)  # sparse: cheap to create, real to read
    spec = PackSpec(code_path=project, call_path="train.py")
    tracemalloc.start()
    try:
        pack(spec, tmp_path / "cache")
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 32 * 1024 * 1024


@pytest.mark.parametrize("level", [1, 19])
def test_compression_level_is_applied(spec: PackSpec, cache: Path, level: int) -> None:
    default = pack(spec, cache).layer(LayerRole.code)
    other = pack(spec.model_copy(update={"compression_level": level}), cache)
    changed = other.layer(LayerRole.code)
    assert default is not None and changed is not None
    assert changed.layer.digest != default.layer.digest
    assert names(changed.path) == names(default.path)


def test_same_input_gives_the_same_digests(spec: PackSpec, tmp_path: Path) -> None:
    first = pack(spec, tmp_path / "cache-1")
    second = pack(spec.model_copy(update={"threads": 1}), tmp_path / "cache-2")
    assert [p.layer.digest for p in first.layers] == [p.layer.digest for p in second.layers]
    assert not any(p.reused for p in second.layers)
