"""Safe extraction: what a layer may hold, what is refused, and that nothing lands outside."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from j2c_server.unpack.errors import LayerCorrupt, LocalIOError, UnsafeEntry
from j2c_server.unpack.extract import extract_layer
from tests.unpack.helpers import OLD_MTIME, Entry, write_layer


@pytest.fixture
def box(tmp_path: Path) -> Path:
    """The folder around the target: anything escaping the target would land here."""
    path = tmp_path / "box"
    path.mkdir()
    return path


def everything_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def extract(box: Path, entries: list[Entry], *, venv: bool = False) -> Path:
    archive = write_layer(box.parent / "layer.tar.zst", entries)
    target = box / "target"
    extract_layer(archive, target, venv=venv)
    return target


def test_files_folders_and_links_are_extracted_with_modes_and_mtimes(box: Path):
    target = extract(
        box,
        [
            Entry("pkg", "dir", mode=0o755),
            Entry("pkg/run.sh", data=b"#!/bin/sh\necho hi\n", mode=0o750),
            Entry("pkg/data.txt", data=b"x" * 3_000_000),
            Entry("pkg/alias", "symlink", target="data.txt"),
            Entry("pkg/copy", "hardlink", target="pkg/data.txt"),
        ],
    )
    script = target / "pkg" / "run.sh"
    assert script.read_bytes() == b"#!/bin/sh\necho hi\n"
    assert stat.S_IMODE(script.stat().st_mode) == 0o750
    assert script.stat().st_mtime == OLD_MTIME
    assert (target / "pkg").stat().st_mtime == OLD_MTIME
    assert (target / "pkg" / "alias").read_bytes() == b"x" * 3_000_000
    assert (target / "pkg" / "copy").stat().st_ino == (target / "pkg" / "data.txt").stat().st_ino


def test_setuid_and_setgid_bits_are_dropped(box: Path):
    target = extract(box, [Entry("tool", data=b"x", mode=0o6755)])
    assert stat.S_IMODE((target / "tool").stat().st_mode) == 0o755


def test_read_only_folders_stay_writable_for_their_owner(box: Path):
    target = extract(box, [Entry("ro", "dir", mode=0o555), Entry("ro/f", data=b"x")])
    assert stat.S_IMODE((target / "ro").stat().st_mode) == 0o755


def test_a_venv_layer_may_link_its_interpreter_to_the_base_python(box: Path):
    target = extract(
        box,
        [
            Entry("bin", "dir"),
            Entry("bin/python3.11", "symlink", target="/usr/local/bin/python3.11"),
            Entry("bin/python3", "symlink", target="python3.11"),
            Entry("bin/python", "symlink", target="python3"),
        ],
        venv=True,
    )
    assert os.readlink(target / "bin" / "python3.11") == "/usr/local/bin/python3.11"


MALICIOUS = {
    "absolute name": ([Entry("/tmp/j2c-escaped", data=b"x")], "/tmp/j2c-escaped"),
    "dot-dot name": ([Entry("../escaped", data=b"x")], "../escaped"),
    "dot-dot inside a name": ([Entry("a/../../escaped", data=b"x")], "a/../../escaped"),
    "absolute symlink": ([Entry("link", "symlink", target="/etc")], "link"),
    "relative symlink leaving the layer": (
        [Entry("d", "dir"), Entry("d/link", "symlink", target="../../outside")],
        "d/link",
    ),
    "symlink chain leaving the layer": (
        [
            Entry("sub", "dir"),
            Entry("up", "symlink", target="here/.."),
            Entry("here", "symlink", target="."),
        ],
        "up",
    ),
    "symlink loop": (
        [Entry("a", "symlink", target="b"), Entry("b", "symlink", target="a")],
        "symlink",
    ),
    "write through a symlink": (
        [Entry("link", "symlink", target="sub"), Entry("link/file", data=b"x")],
        "link/file",
    ),
    "hard link to an absolute path": (
        [Entry("hard", "hardlink", target="/etc/passwd")],
        "hard",
    ),
    "hard link leaving the layer": ([Entry("hard", "hardlink", target="../secret")], "hard"),
    "hard link to an entry not extracted": (
        [Entry("hard", "hardlink", target="nothing-here")],
        "hard",
    ),
    "hard link through a symlink": (
        [
            Entry("f", data=b"x"),
            Entry("link", "symlink", target="."),
            Entry("hard", "hardlink", target="link/f"),
        ],
        "hard",
    ),
    "character device": ([Entry("null", "chr")], "null"),
    "block device": ([Entry("disk", "blk")], "disk"),
    "FIFO": ([Entry("pipe", "fifo")], "pipe"),
    "interpreter link in a code layer": (
        [Entry("bin", "dir"), Entry("bin/python", "symlink", target="/usr/bin/python3")],
        "bin/python",
    ),
    "venv link leaving through the interpreter link": (
        [
            Entry("bin", "dir"),
            Entry("bin/python", "symlink", target="/usr/bin/python3"),
            Entry("escape", "symlink", target="bin/python/../.."),
        ],
        "escape",
    ),
}


@pytest.mark.parametrize("entries, named", MALICIOUS.values(), ids=MALICIOUS.keys())
def test_malicious_entry_is_refused_naming_it(box: Path, entries: list[Entry], named: str):
    venv = named == "escape"
    with pytest.raises(UnsafeEntry, match=named):
        extract(box, entries, venv=venv)


@pytest.mark.parametrize("entries, named", MALICIOUS.values(), ids=MALICIOUS.keys())
def test_malicious_archive_writes_nothing_outside_and_leaves_the_target_empty(
    box: Path, entries: list[Entry], named: str
):
    with pytest.raises(UnsafeEntry):
        extract(box, entries, venv=named == "escape")
    assert everything_under(box) == ["target"]
    assert not os.path.lexists("/tmp/j2c-escaped")


def test_a_huge_extended_header_is_refused_before_it_is_read(box: Path):
    with pytest.raises(UnsafeEntry, match="extended header"):
        extract(box, [Entry("deep/" * 400_000 + "name", data=b"x")])
    assert everything_under(box) == ["target"]


def test_a_file_that_is_not_a_tar_zst_is_corrupt(box: Path):
    archive = box.parent / "layer.tar.zst"
    archive.write_bytes(b"not zstd at all")
    with pytest.raises(LayerCorrupt, match=r"layer\.tar\.zst"):
        extract_layer(archive, box / "target")


def test_a_target_that_is_not_empty_is_refused(box: Path):
    archive = write_layer(box.parent / "layer.tar.zst", [Entry("f", data=b"x")])
    (box / "target").mkdir()
    (box / "target" / "mine").write_text("keep")
    with pytest.raises(LocalIOError, match="not empty"):
        extract_layer(archive, box / "target")
    assert (box / "target" / "mine").read_text() == "keep"


DEEP = "d/" * 300 + "f"  # deeper than MAX_DEPTH, well under PATH_MAX: only j2c's limit stops it

TOO_DEEP_OR_LONG = {
    "deep file": ([Entry(DEEP, data=b"x")], "301 folders deep"),
    "deep folder": ([Entry("d/" * 1100, "dir")], "1100 folders deep"),
    "hard link to a deep name": (
        [Entry("f", data=b"x"), Entry("hard", "hardlink", target=DEEP)],
        "'hard' links to a name that is 301 folders deep",
    ),
    "long symlink target": (
        [Entry("link", "symlink", target="x" * 5000)],
        "'link' is a symlink with a too long target",
    ),
}


@pytest.mark.parametrize("entries, message", TOO_DEEP_OR_LONG.values(), ids=TOO_DEEP_OR_LONG.keys())
def test_too_deep_or_too_long_names_are_refused_as_unsafe(
    box: Path, entries: list[Entry], message: str
):
    with pytest.raises(UnsafeEntry, match=message):
        extract(box, entries)
    assert everything_under(box) == ["target"]
