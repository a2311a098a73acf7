"""``j2c build`` end to end: the installed console script in a subprocess, a real file:// store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from j2c_server.wire.manifest import Manifest

J2C = str(Path(sys.executable).parent / "j2c")


def run_build(
    data_dir: Path, *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "J2C_DATA_DIR": str(data_dir)}
    env.pop("J2C_CONFIG", None)
    return subprocess.run(
        [J2C, "build", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120
    )


def build_json(data_dir: Path, *args: str) -> dict[str, Any]:
    done = run_build(data_dir, *args, "--json")
    assert done.returncode == 0, done.stderr
    output: dict[str, Any] = json.loads(done.stdout)
    return output


def test_build_json_publishes_a_manifest_and_its_layers(
    project: Path, venv: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    args = ["--code-path", str(project), "--call-path", "train.py", "--venv-path", str(venv)]
    out = build_json(data, *args)
    assert set(out) == {"manifest", "seconds", "layers", "big_files", "warnings"}
    assert [layer["role"] for layer in out["layers"]] == ["code", "venv"]
    assert set(out["layers"][0]) == {"role", "digest", "bytes", "files", "reused", "seconds"}
    manifest_path = Path(urlparse(out["manifest"]).path)
    assert manifest_path.is_relative_to(data / "store")
    manifest = Manifest.model_validate_json(manifest_path.read_text())
    assert [layer.digest for layer in manifest.layers] == [x["digest"] for x in out["layers"]]
    for layer in out["layers"]:
        blob = data / "store" / "blobs" / "sha256" / (layer["digest"][7:] + ".tar.zst")
        assert blob.stat().st_size == layer["bytes"]
    assert any(w["code"] == "secret" for w in out["warnings"])


def test_second_build_after_a_code_change_reuses_the_venv_layer(
    project: Path, venv: Path, tmp_path: Path
) -> None:
    args = ["--code-path", str(project), "--call-path", "train.py", "--venv-path", str(venv)]
    first = build_json(tmp_path / "data", *args)
    (project / "train.py").write_text("print('one line changed')\n")
    second = build_json(tmp_path / "data", *args)
    assert second["layers"][0]["digest"] != first["layers"][0]["digest"]
    assert second["layers"][1]["reused"] is True
    assert second["layers"][1]["digest"] == first["layers"][1]["digest"]


def test_build_with_a_module_entry_and_an_explicit_store(project: Path, tmp_path: Path) -> None:
    store = tmp_path / "elsewhere"
    args = ["--code-path", str(project), "--call-path", "-m mypkg", "--store", store.as_uri()]
    out = build_json(tmp_path / "data", *args, "--compression-level", "9")
    manifest = Manifest.model_validate_json(Path(urlparse(out["manifest"]).path).read_text())
    assert (manifest.entry.kind, manifest.entry.target) == ("module", "mypkg")
    assert Path(urlparse(out["manifest"]).path).is_relative_to(store)


def test_build_prints_the_manifest_uri_alone_on_stdout(project: Path, tmp_path: Path) -> None:
    done = run_build(tmp_path / "data", "--code-path", str(project), "--call-path", "train.py")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("file://")
    assert len(done.stdout.strip().splitlines()) == 1
    assert "code layer:" in done.stderr


def test_bad_input_exits_2_with_a_message_and_writes_nothing(project: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    done = run_build(data, "--code-path", str(project), "--call-path", "missing.py", "--json")
    assert done.returncode == 2
    assert "missing.py" in done.stderr and "does not exist" in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""
    assert not data.exists()


def test_bad_venv_exits_2(project: Path, tmp_path: Path) -> None:
    args = ["--code-path", str(project), "--call-path", "train.py", "--venv-path", str(project)]
    done = run_build(tmp_path / "data", *args)
    assert done.returncode == 2
    assert "not a virtual environment" in done.stderr and "Traceback" not in done.stderr


def test_build_sends_a_big_file_once(project: Path, tmp_path: Path) -> None:
    (project / "data" / "images.bin").write_bytes(bytes(range(256)) * 8192)  # 2 MiB
    args = ["--code-path", str(project), "--call-path", "train.py"]
    first = build_json(tmp_path / "data", *args)
    [big] = first["big_files"]
    assert (big["path"], big["size"], big["reused"]) == ("data/images.bin", 2 * 1024 * 1024, False)
    blob = tmp_path / "data" / "store" / "blobs" / "sha256" / (big["digest"][7:] + ".file")
    assert blob.read_bytes() == (project / "data" / "images.bin").read_bytes()
    (project / "train.py").write_text("print('one line changed')\n")
    done = run_build(tmp_path / "data", *args)
    assert done.returncode == 0, done.stderr
    assert "big file data/images.bin: 2.1 MB, its own blob" in done.stderr
    assert "uploaded 0.0 MB" in done.stderr  # the small code layer only
