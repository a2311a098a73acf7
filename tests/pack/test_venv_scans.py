"""A venv's scan kept between sends while a file-system watch vouches for it: every kind of
change under the venv makes the next send walk it again (never ship stale files), an unchanged
venv is answered from the kept scan, and where no watch can be trusted every send walks.

Real inotify on this machine's file system (the tests skip where the temp folder's file system
is not one the watch trusts, e.g. a network mount)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from j2c_server.config import load_settings
from j2c_server.jobs.pack_worker import PackWorkers
from j2c_server.pack import PackSpec
from j2c_server.pack import tree_watch as tree_watch_module
from j2c_server.pack.changes import scan_report
from j2c_server.pack.plan import prepare
from j2c_server.pack.tree_watch import TreeWatch
from j2c_server.pack.venv_scans import TRUST_S, VenvScans
from tests.support.projects import make_project, make_venv


def _tree(root: Path) -> Path:
    (root / "lib" / "pkg").mkdir(parents=True)
    (root / "lib" / "pkg" / "mod.py").write_text("x = 1\n")
    (root / "top.txt").write_text("top\n")
    return root


def _watch(root: Path) -> TreeWatch:
    watch = TreeWatch.start(root)
    if watch is None:
        pytest.skip(f"no trusted watch on {tree_watch_module.file_system_type(root.resolve())}")
    return watch


def _same_size_rewrite(path: Path) -> None:
    """Change a file's bytes and put its size and mtime back: invisible to a stat walk."""
    st = path.stat()
    data = path.read_bytes()
    path.write_bytes(data[::-1] if data[::-1] != data else b"#" * len(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


CHANGES = {
    "a new file deep down": lambda r: (r / "lib" / "pkg" / "new.py").write_text("y = 2\n"),
    "a same-size rewrite with the mtime put back": lambda r: _same_size_rewrite(
        r / "lib" / "pkg" / "mod.py"
    ),
    "a mode change": lambda r: (r / "top.txt").chmod(0o600),
    "a removal": lambda r: (r / "top.txt").unlink(),
    "a rename inside": lambda r: (r / "top.txt").rename(r / "lib" / "top.txt"),
    "a new folder": lambda r: (r / "lib" / "other").mkdir(),
    "only an mtime": lambda r: os.utime(r / "lib" / "pkg" / "mod.py", (1, 1)),
}


@pytest.mark.parametrize("change", list(CHANGES), ids=list(CHANGES))
def test_every_kind_of_change_is_seen(tmp_path: Path, change: str) -> None:
    root = _tree(tmp_path / "venv")
    watch = _watch(root)
    try:
        assert not watch.changed()
        CHANGES[change](root)
        assert watch.changed()
        assert watch.changed(), "a seen change stays seen"
    finally:
        watch.close()


def test_a_file_made_in_a_folder_made_after_the_watch_is_seen(tmp_path: Path) -> None:
    root = _tree(tmp_path / "venv")
    watch = _watch(root)
    try:
        (root / "lib" / "pkg" / "sub").mkdir()
        assert watch.changed()
    finally:
        watch.close()


def test_reading_files_is_not_a_change(tmp_path: Path) -> None:
    root = _tree(tmp_path / "venv")
    watch = _watch(root)
    try:
        (root / "lib" / "pkg" / "mod.py").read_bytes()
        os.listdir(root / "lib")
        assert not watch.changed()
    finally:
        watch.close()


def test_a_venv_replaced_at_its_path_is_not_the_kept_one(tmp_path: Path) -> None:
    """The kept scan belongs to a folder, not a path: a venv moved away and another made in its
    place (even under a replaced parent, which no watch of the tree sees) is walked."""
    parent = tmp_path / "envs"
    root = _tree(parent / "venv")
    scans = VenvScans()
    walks: list[Path] = []

    def walk_fn(path: Path):  # type: ignore[no-untyped-def]
        from j2c_server.pack.scan import scan_venv

        walks.append(path)
        return scan_venv(path)

    scans.scan(root, (), lambda: walk_fn(root))
    parent.rename(tmp_path / "envs-old")
    _tree(parent / "venv")
    scans.scan(root, (), lambda: walk_fn(root))
    assert len(walks) == 2 and scans.hits == 0
    scans.close()


def _spec(project: Path, venv: Path, **fields: object) -> PackSpec:
    return PackSpec(code_path=project, call_path="train.py", venv_path=venv, **fields)


def test_an_unchanged_venv_is_answered_from_the_kept_scan(tmp_path: Path) -> None:
    project, venv = make_project(tmp_path / "p"), make_venv(tmp_path / "venv")
    _watch(venv).close()
    scans = VenvScans()
    first = scan_report(prepare(_spec(project, venv), scans), tmp_path / "c", None)
    second = scan_report(prepare(_spec(project, venv), scans), tmp_path / "c", first.content)
    assert scans.hits == 1
    assert second.content == first.content and second.changed_files == 0
    scans.close()


def test_an_in_place_venv_edit_ships_the_new_content(tmp_path: Path) -> None:
    project, venv = make_project(tmp_path / "p"), make_venv(tmp_path / "venv")
    _watch(venv).close()
    scans = VenvScans()
    first = scan_report(prepare(_spec(project, venv), scans), tmp_path / "c", None)
    installed = venv / "lib" / "added.py"
    installed.write_text("z = 3\n")
    second = scan_report(prepare(_spec(project, venv), scans), tmp_path / "c", first.content)
    assert scans.hits == 0
    assert second.content["venv"] != first.content["venv"]
    assert [(c.layer.value, c.path, c.change) for c in second.changes] == [
        ("venv", "lib/added.py", "added")
    ]
    scans.close()


def test_other_rules_or_an_old_scan_walk_again(tmp_path: Path) -> None:
    project, venv = make_project(tmp_path / "p"), make_venv(tmp_path / "venv")
    _watch(venv).close()
    now = [0.0]
    scans = VenvScans(clock=lambda: now[0])
    prepare(_spec(project, venv), scans)
    prepare(_spec(project, venv, never_pack=[tmp_path / "elsewhere"]), scans)
    assert scans.hits == 0, "other rules: walked"
    prepare(_spec(project, venv, never_pack=[tmp_path / "elsewhere"]), scans)
    assert scans.hits == 1
    now[0] += TRUST_S + 1
    prepare(_spec(project, venv, never_pack=[tmp_path / "elsewhere"]), scans)
    assert scans.hits == 1, "older than the trust bound: walked"
    prepare(_spec(project, venv, watch_venv=False), scans)
    assert scans.hits == 1, "watch_venv off: walked"
    scans.close()


def test_no_watch_on_a_file_system_it_cannot_trust(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A network file system's inotify misses writes from other machines: no kept scan."""
    project, venv = make_project(tmp_path / "p"), make_venv(tmp_path / "venv")
    monkeypatch.setattr(tree_watch_module, "file_system_type", lambda path: "nfs4")
    assert TreeWatch.start(venv) is None
    scans = VenvScans()
    prepare(_spec(project, venv), scans)
    prepare(_spec(project, venv), scans)
    assert scans.hits == 0
    scans.close()


def test_mount_types_are_read_from_the_longest_mount_point() -> None:
    assert tree_watch_module.file_system_type(Path("/proc/self")) == "proc"
    assert tree_watch_module.file_system_type(Path("/")) is not None


def test_a_pack_worker_sees_a_package_installed_between_sends(tmp_path: Path) -> None:
    """Through the server's long-lived worker process: the second send after an install names
    the installed file, the third (nothing changed) attaches to the same fingerprints."""
    project, venv = make_project(tmp_path / "p"), make_venv(tmp_path / "venv")
    spec, cache = _spec(project, venv), tmp_path / "cache"

    async def sends() -> list[tuple[dict[str, str], list[str]]]:
        workers = PackWorkers(1)
        seen = []
        try:
            first = await workers.scan(spec, cache)
            seen.append((first.report.content, []))
            (venv / "lib" / "installed.py").write_text("w = 4\n")
            second = await workers.scan(spec, cache, first.report.content)
            seen.append((second.report.content, [c.path for c in second.report.changes]))
            third = await workers.scan(spec, cache, second.report.content)
            seen.append((third.report.content, [c.path for c in third.report.changes]))
        finally:
            await workers.close()
        return seen

    (first, _), (second, changed), (third, unchanged) = asyncio.run(sends())
    assert second["venv"] != first["venv"] and changed == ["lib/installed.py"]
    assert third == second and unchanged == []


@pytest.mark.parametrize("value", ["true", "false"])
def test_the_pack_setting_watch_venv_reaches_every_send(tmp_path: Path, value: str) -> None:
    """``pack.watch_venv: false`` (docs/packing.md) makes the server's sends walk the venv:
    the setting, loaded as an operator writes it, reaches the spec the send packs with."""
    config = tmp_path / "j2c.yaml"
    config.write_text(f"pack:\n  watch_venv: {value}\n")
    settings = load_settings(config_file=config, environ={})
    project, venv = make_project(tmp_path / "p"), make_venv(tmp_path / "venv")
    _watch(venv).close()
    spec = PackSpec.from_settings(
        settings.pack, code_path=project, call_path="train.py", venv_path=venv
    )
    scans = VenvScans()
    prepare(spec, scans)
    prepare(spec, scans)
    assert spec.watch_venv is (value == "true")
    assert scans.hits == (1 if value == "true" else 0)
    scans.close()
