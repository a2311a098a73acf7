"""The lab's layer cache stays bounded: least recently used blobs go beyond the cap, the last
few used always stay, and their index records go with them. Through the real packer."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from j2c_server.config import PackSettings
from j2c_server.pack import PackSpec, pack
from j2c_server.pack.fingerprint import DEFAULT_MAX_BYTES, KEEP_RECENT
from j2c_server.wire.manifest import LayerRole


def edit(project: Path, number: int) -> None:
    (project / "train.py").write_text(f"print('edit {number}')\n")
    os.utime(project / "train.py", (1_700_000_000 + number, 1_700_000_000 + number))


def blobs(cache: Path) -> set[str]:
    return {p.name for p in (cache / "blobs").glob("*.tar.zst")}


def test_the_setting_reaches_the_packers_cache() -> None:
    spec = PackSpec.from_settings(PackSettings(layer_cache_max_mb=3), code_path=".", call_path="x")
    assert spec.layer_cache_max_bytes == 3 * 1024 * 1024


def test_edits_beyond_the_cap_evict_the_oldest_layers(
    spec: PackSpec, project: Path, cache: Path
) -> None:
    # A 1-byte cap: every blob beyond the last few is over it.
    spec = spec.model_copy(update={"layer_cache_max_bytes": 1})
    digests = []
    for number in range(6):
        edit(project, number)
        result = pack(spec, cache)
        digests.append({p.layer.role: p.layer.digest for p in result.layers})

    kept = blobs(cache)
    assert len(kept) == KEEP_RECENT
    venv_blob = digests[0][LayerRole.venv].removeprefix("sha256:") + ".tar.zst"
    assert venv_blob in kept  # written first, but used by every pack: the last to go
    recent = {d[LayerRole.code].removeprefix("sha256:") + ".tar.zst" for d in digests[-3:]}
    assert recent <= kept
    assert len(list((cache / "layers").glob("*.json"))) == KEEP_RECENT  # records went too

    edit(project, 0)  # the first edit again: its layer was evicted, so it is packed again
    again = {p.layer.role: p.reused for p in pack(spec, cache).layers}
    assert again == {LayerRole.code: False, LayerRole.venv: True}


def test_under_the_cap_nothing_is_removed(spec: PackSpec, project: Path, cache: Path) -> None:
    for number in range(6):
        edit(project, number)
        pack(spec, cache)
    assert len(blobs(cache)) == 7  # six code layers and the venv


def test_the_cap_is_a_setting() -> None:
    assert PackSettings().layer_cache_max_mb * 1024 * 1024 == DEFAULT_MAX_BYTES
    assert PackSettings(layer_cache_max_mb=10).layer_cache_max_mb == 10
    with pytest.raises(ValueError, match="layer_cache_max_mb"):
        PackSettings(layer_cache_max_mb=0)


def test_each_project_keeps_its_last_sends_whatever_the_cap(tmp_path: Path, cache: Path) -> None:
    from tests.support.projects import make_project

    def spec_for(root: Path) -> PackSpec:
        return PackSpec(code_path=root, call_path="train.py", layer_cache_max_bytes=1)

    ours = make_project(tmp_path / "ours", secrets=False)
    sends = []
    for number in range(3):
        edit(ours, number)
        sends.append(pack(spec_for(ours), cache).layers[0].path.name)
    # Many other projects sent since: far more blobs than KEEP_RECENT, each over the cap.
    for other in range(KEEP_RECENT + 2):
        root = make_project(tmp_path / f"other-{other}", secrets=False)
        edit(root, 100 + other)
        pack(spec_for(root), cache)
    kept = blobs(cache)
    assert sends[1] in kept and sends[2] in kept  # the last 2 sends of ours (the default)
    assert sends[0] not in kept  # an older one goes under the cap
    # Back to our project: its layer is found, not packed again.
    assert pack(spec_for(ours), cache).layers[0].reused


def test_keep_sends_zero_keeps_only_the_most_recent(tmp_path: Path, cache: Path) -> None:
    from tests.support.projects import make_project

    ours = make_project(tmp_path / "ours", secrets=False)
    edit(ours, 1)
    spec = PackSpec(
        code_path=ours, call_path="train.py", layer_cache_max_bytes=1, layer_cache_keep_sends=0
    )
    first = pack(spec, cache).layers[0].path.name
    for other in range(KEEP_RECENT + 1):
        root = make_project(tmp_path / f"other-{other}", secrets=False)
        edit(root, 100 + other)
        pack(spec.model_copy(update={"code_path": root}), cache)
    assert first not in blobs(cache)
