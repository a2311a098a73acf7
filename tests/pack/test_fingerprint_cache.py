"""Unchanged layers are recognised from a stat walk and reused; changed ones are re-packed."""

from __future__ import annotations

import os
from pathlib import Path

from j2c_server.pack import PackProgress, PackResult, PackSpec, pack
from j2c_server.wire.manifest import LayerRole
from tests.support.projects import OLD_MTIME, backdate, write


def by_role(result: PackResult) -> dict[LayerRole, tuple[str, bool]]:
    return {p.layer.role: (p.layer.digest, p.reused) for p in result.layers}


def test_second_pack_of_an_unchanged_tree_reuses_both_layers(spec: PackSpec, cache: Path) -> None:
    first = by_role(pack(spec, cache))
    second = by_role(pack(spec, cache))
    assert {role: digest for role, (digest, _) in second.items()} == {
        role: digest for role, (digest, _) in first.items()
    }
    assert all(reused for _, reused in second.values())


def test_reuse_is_decided_without_reading_contents(
    spec: PackSpec, project: Path, cache: Path
) -> None:
    first = by_role(pack(spec, cache))
    # Same size, same mtime, other bytes: only a content read could notice.
    (project / "train.py").write_text((project / "train.py").read_text().upper())
    os.utime(project / "train.py", (OLD_MTIME, OLD_MTIME))
    second = by_role(pack(spec, cache))
    assert second[LayerRole.code] == (first[LayerRole.code][0], True)


def test_changed_code_file_repacks_only_the_code_layer(
    spec: PackSpec, project: Path, cache: Path
) -> None:
    first = by_role(pack(spec, cache))
    with (project / "train.py").open("a") as script:
        script.write("print('one more line')\n")
    second = by_role(pack(spec, cache))
    assert second[LayerRole.code][0] != first[LayerRole.code][0]
    assert not second[LayerRole.code][1]
    assert second[LayerRole.venv] == (first[LayerRole.venv][0], True)


def test_touched_file_repacks_to_the_same_digest(
    spec: PackSpec, project: Path, cache: Path
) -> None:
    first = by_role(pack(spec, cache))
    os.utime(project / "train.py", (OLD_MTIME, OLD_MTIME + 0.5))  # same second: same archive
    second = by_role(pack(spec, cache))
    assert second[LayerRole.code] == (first[LayerRole.code][0], False)


def test_layer_with_just_written_files_is_not_remembered(
    spec: PackSpec, project: Path, cache: Path
) -> None:
    write(project / "fresh.py", "print('written a moment ago')\n")
    first = by_role(pack(spec, cache))
    second = by_role(pack(spec, cache))
    assert second[LayerRole.code] == (first[LayerRole.code][0], False)
    backdate(project)
    by_role(pack(spec, cache))
    assert by_role(pack(spec, cache))[LayerRole.code][1]


def test_missing_blob_is_packed_again(spec: PackSpec, cache: Path) -> None:
    first = pack(spec, cache)
    venv = first.layer(LayerRole.venv)
    assert venv is not None
    venv.path.unlink()
    again = pack(spec, cache).layer(LayerRole.venv)
    assert again is not None
    assert (again.layer.digest, again.reused) == (venv.layer.digest, False)
    assert again.path.exists()


def test_cache_holds_no_temporary_files_after_packing(spec: PackSpec, cache: Path) -> None:
    pack(spec, cache)
    leftovers = [p.name for p in (cache / "blobs").iterdir() if p.name.startswith(".tmp-")]
    assert leftovers == []
    assert (cache / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f597d28d172789f")


def test_progress_reaches_the_totals_and_flags_reused_layers(spec: PackSpec, cache: Path) -> None:
    seen: list[PackProgress] = []
    pack(spec, cache, progress=seen.append)
    for role in (LayerRole.code, LayerRole.venv):
        mine = [p for p in seen if p.role == role]
        assert mine[0].files_done == 0 and mine[0].bytes_done == 0
        assert mine[-1].files_done == mine[-1].files_total > 0
        assert mine[-1].bytes_done == mine[-1].bytes_total > 0
        assert [p.bytes_done for p in mine] == sorted(p.bytes_done for p in mine)
    again: list[PackProgress] = []
    pack(spec, cache, progress=again.append)
    assert [(p.role, p.reused) for p in again] == [(LayerRole.code, True), (LayerRole.venv, True)]
