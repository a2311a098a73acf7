"""Every way a job can be broken stops it before user code runs, with its own exit code."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from j2c_server.unpack.errors import ExitCode
from j2c_server.unpack.fetch import CHUNK
from j2c_server.wire.manifest import EntryPoint, LayerRole, Manifest
from tests.unpack.conftest import SmallJob
from tests.unpack.helpers import PYTHON_VERSION, Entry, blob_path, publish_layers, run_unpack

RAN = "USER CODE RAN"


def manifest_of(uri: str) -> Manifest:
    return Manifest.model_validate_json(Path(uri.removeprefix("file://")).read_bytes())


def test_a_job_that_is_fine_runs(small_job: SmallJob, tmp_path: Path):
    done = run_unpack(small_job.publish(), "--workdir", str(tmp_path / "job"))
    assert done.returncode == 0, done.stderr
    assert RAN in done.stdout


def test_python_mismatch_stops_before_downloading_and_names_both_versions(
    small_job: SmallJob, tmp_path: Path
):
    def older_python(manifest: Manifest) -> Manifest:
        assert manifest.venv is not None
        venv = manifest.venv.model_copy(update={"python_version": "3.9"})
        return manifest.model_copy(update={"venv": venv, "source_image": "lab/image:2024.1"})

    workdir = tmp_path / "job"
    done = run_unpack(small_job.publish(edit=older_python), "--workdir", str(workdir))
    assert done.returncode == ExitCode.PYTHON
    assert f"made with Python 3.9, but this container runs Python {PYTHON_VERSION}" in done.stderr
    assert "lab/image:2024.1" in done.stderr
    assert not (workdir / "blobs").exists()


def test_a_corrupt_layer_stops_before_anything_is_extracted(small_job: SmallJob, tmp_path: Path):
    uri = small_job.publish()
    venv_layer = manifest_of(uri).layer(LayerRole.venv)
    assert venv_layer is not None
    blob = blob_path(small_job.store, venv_layer.digest)
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.write_bytes(bytes(data))
    workdir = tmp_path / "job"
    done = run_unpack(uri, "--workdir", str(workdir), "--paths", "relocate")
    assert done.returncode == ExitCode.CORRUPT
    assert f"expected {venv_layer.digest}" in done.stderr
    assert RAN not in done.stdout
    assert not (workdir / "code").exists() and not (workdir / "venv").exists()


def test_a_replaced_layer_is_read_no_further_than_the_size_its_manifest_pins(
    small_job: SmallJob, tmp_path: Path
):
    """Whoever can write the store replaces a layer with a huge object: the job reads about the
    pinned size of it (one chunk past), not all of it, before refusing it."""
    uri = small_job.publish()
    venv_layer = manifest_of(uri).layer(LayerRole.venv)
    assert venv_layer is not None
    blob = blob_path(small_job.store, venv_layer.digest)
    os.truncate(blob, 1024 * 1024 * 1024)  # 1 GiB (sparse: no disk)
    done = run_unpack(uri, "--workdir", str(tmp_path / "job"), "--paths", "relocate")
    assert done.returncode == ExitCode.CORRUPT, done.stderr
    read = re.search(r"got more than \d+ bytes \(read no further than (\d+)\)", done.stderr)
    assert read is not None, done.stderr[-1500:]
    assert int(read.group(1)) <= venv_layer.size + CHUNK
    assert RAN not in done.stdout


def test_a_missing_layer_stops_the_job_naming_it(small_job: SmallJob, tmp_path: Path):
    uri = small_job.publish()
    code_layer = manifest_of(uri).layer(LayerRole.code)
    assert code_layer is not None
    blob_path(small_job.store, code_layer.digest).unlink()
    done = run_unpack(uri, "--workdir", str(tmp_path / "job"))
    assert done.returncode == ExitCode.MISSING
    assert code_layer.digest.removeprefix("sha256:") in done.stderr
    assert RAN not in done.stdout


def test_a_missing_manifest_is_missing(store: Path, tmp_path: Path):
    uri = (store / "manifests" / "sha256" / f"{'0' * 64}.json").as_uri()
    done = run_unpack(uri, "--workdir", str(tmp_path / "job"))
    assert done.returncode == ExitCode.MISSING
    assert "does not exist" in done.stderr


def test_a_manifest_that_does_not_match_its_name_is_corrupt(small_job: SmallJob, tmp_path: Path):
    uri = small_job.publish()
    path = Path(uri.removeprefix("file://"))
    path.write_bytes(path.read_bytes().replace(b'"args":[]', b'"args":["--evil"]'))
    done = run_unpack(uri, "--workdir", str(tmp_path / "job"))
    assert done.returncode == ExitCode.CORRUPT
    assert "does not match its digest" in done.stderr


def test_an_invalid_manifest_names_the_field(store: Path, tmp_path: Path):
    path = store / "jobs" / "job-1" / "manifest.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"created_by": "x", "created_at": 0, "layers": []}))
    done = run_unpack(path.as_uri(), "--workdir", str(tmp_path / "job"))
    assert done.returncode == ExitCode.MANIFEST
    assert "entry: Field required" in done.stderr


def test_a_manifest_from_a_newer_j2c_asks_for_a_newer_j2c_unpack(store: Path, tmp_path: Path):
    path = store / "jobs" / "job-1" / "manifest.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"format_version": 99, "future_field": True}))
    done = run_unpack(path.as_uri(), "--workdir", str(tmp_path / "job"))
    assert done.returncode == ExitCode.MANIFEST
    assert "install a newer j2c" in done.stderr


def test_an_unsafe_layer_stops_the_job_and_writes_nothing_outside(store: Path, tmp_path: Path):
    uri = publish_layers(
        store,
        {LayerRole.code: [Entry("job.py", data=b"print('USER CODE RAN')\n"), Entry("../x.py")]},
        entry=EntryPoint(kind="script", target="job.py"),
        source_root=str(tmp_path / "lab"),
    )
    workdir = tmp_path / "job"
    done = run_unpack(uri, "--workdir", str(workdir), "--paths", "relocate")
    assert done.returncode == ExitCode.UNSAFE
    assert "'../x.py'" in done.stderr
    assert RAN not in done.stdout
    assert not (workdir / "x.py").exists() and list((workdir / "code").iterdir()) == []


def test_an_entry_point_missing_from_the_code_layer_is_not_runnable(store: Path, tmp_path: Path):
    uri = publish_layers(
        store,
        {LayerRole.code: [Entry("other.py", data=b"")]},
        entry=EntryPoint(kind="script", target="train.py"),
        source_root=str(tmp_path / "lab"),
    )
    done = run_unpack(uri, "--workdir", str(tmp_path / "job"))
    assert done.returncode == ExitCode.ENTRY
    assert "train.py is not in the code layer" in done.stderr
