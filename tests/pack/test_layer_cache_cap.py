"""The lab's layer cache stays bounded: least recently used blobs go beyond the cap, the last
few used always stay, and their index records go with them. Through the real packer."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from j2c_server.config import PackSettings
from j2c_server.models import LayerRole
from j2c_server.pack import PackSpec, pack
from j2c_server.pack.fingerprint import DEFAULT_MAX_BYTES, KEEP_RECENT


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
