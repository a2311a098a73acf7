"""j2c-unpack places the code layer's big files: each downloaded as its own blob, verified, put
at its path with its mode; a manifest entry that would land outside the code folder (or go
through a symlink, or over a layer's file) is refused before user code runs. Real packer, real
``file://`` store, ``j2c-unpack`` as a subprocess."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from j2c_server.unpack.errors import ExitCode
from j2c_server.wire.manifest import FileBlob, Manifest
from tests.support.projects import backdate, write
from tests.unpack.helpers import publish_project, run_unpack

MIB = 1024 * 1024
JOB = """\
import hashlib, json, os, pathlib
seen = {}
for rel in ("data/train.bin", "tools/fetch.sh", "data/copy.bin"):
    path = pathlib.Path(rel)
    seen[rel] = [hashlib.sha256(path.read_bytes()).hexdigest(), oct(path.stat().st_mode & 0o777)]
print("BIG", json.dumps(seen), flush=True)
"""


def data(size: int, seed: bytes) -> bytes:
    return (hashlib.sha256(seed).digest() * (size // 32 + 1))[:size]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "lab" / "project"
    write(root / "job.py", JOB)
    (root / "data").mkdir()
    (root / "data" / "train.bin").write_bytes(data(3 * MIB, b"train"))
    (root / "data" / "train.bin").chmod(0o640)
    (root / "data" / "copy.bin").write_bytes(data(3 * MIB, b"train"))  # same bytes: one blob
    (root / "tools").mkdir()
    (root / "tools" / "fetch.sh").write_bytes(data(MIB + 1, b"tool"))
    (root / "tools" / "fetch.sh").chmod(0o755)
    (root / "tools" / "link").symlink_to("../data")
    backdate(root)
    return root


def expected() -> dict[str, list[str]]:
    train = hashlib.sha256(data(3 * MIB, b"train")).hexdigest()
    tool = hashlib.sha256(data(MIB + 1, b"tool")).hexdigest()
    return {
        "data/train.bin": [train, "0o640"],
        "tools/fetch.sh": [tool, "0o755"],
        "data/copy.bin": [train, "0o644"],
    }


def seen(stdout: str) -> dict[str, list[str]]:
    line = next(line for line in stdout.splitlines() if line.startswith("BIG "))
    result: dict[str, list[str]] = json.loads(line[4:])
    return result


def test_unpack_places_big_files_with_their_content_and_mode(project: Path, tmp_path: Path):
    store = tmp_path / "store"
    uri = publish_project(project, store, "job.py")
    manifest = Manifest.model_validate_json(
        (store / "manifests" / "sha256" / (uri.rsplit("/", 1)[1])).read_text()
    )
    assert manifest.files is not None and {f.path for f in manifest.files} == set(expected())
    assert len(list((store / "blobs" / "sha256").glob("*.file"))) == 2
    done = run_unpack(uri, "--workdir", str(tmp_path / "job"), "--paths", "relocate")
    assert done.returncode == 0, done.stderr
    assert seen(done.stdout) == expected()
    assert "3 big files" in done.stderr


def test_a_warm_start_from_the_node_cache_places_them_too(project: Path, tmp_path: Path):
    uri = publish_project(project, tmp_path / "store", "job.py")
    cache = tmp_path / "node-cache"
    said = {}
    for run in ("cold", "warm"):
        workdir = tmp_path / f"job-{run}"
        done = run_unpack(
            uri, "--workdir", str(workdir), "--paths", "relocate", "--cache-dir", str(cache)
        )
        assert done.returncode == 0, done.stderr
        assert seen(done.stdout) == expected()
        said[run] = done.stderr
    assert "0 of 2 big files from the cache" in said["cold"]
    assert "2 of 2 big files from the cache" in said["warm"]
    assert "big file blobs" not in said["warm"]  # nothing downloaded
    # Kept in the cache once per digest (data/train.bin and data/copy.bin share one).
    assert len(list(cache.glob("entries/f-*/data.tar.zst"))) == 2


def test_a_tampered_cached_big_file_is_refused_and_fetched_again(project: Path, tmp_path: Path):
    uri = publish_project(project, tmp_path / "store", "job.py")
    cache = tmp_path / "node-cache"
    options = ["--paths", "relocate", "--cache-dir", str(cache)]
    assert run_unpack(uri, "--workdir", str(tmp_path / "cold"), *options).returncode == 0
    for blob in cache.glob("entries/f-*/data.tar.zst"):
        blob.chmod(0o600)
        blob.write_bytes(b"poisoned" + blob.read_bytes()[8:])
    done = run_unpack(uri, "--workdir", str(tmp_path / "warm"), *options)
    assert done.returncode == 0, done.stderr
    assert "entry refused (it does not hash to sha256:" in done.stderr
    assert seen(done.stdout) == expected()


def _with_path(path: str):  # type: ignore[no-untyped-def]
    def edit(manifest: Manifest) -> Manifest:
        assert manifest.files
        first = manifest.files[0].model_copy(update={"path": path})
        return manifest.model_copy(update={"files": [first, *manifest.files[1:]]})

    return edit


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("../escaped.bin", "has a '..' component"),
        ("data/../../escaped.bin", "has a '..' component"),
        ("/tmp/j2c-escaped.bin", "has an absolute path"),
        ("tools/link/escaped.bin", "would be written through 'tools/link'"),
        ("job.py", "collides with an entry of the code layer"),
    ],
)
def test_a_manifest_entry_escaping_the_code_folder_is_refused(
    project: Path, tmp_path: Path, path: str, why: str
):
    uri = publish_project(project, tmp_path / "store", "job.py", edit=_with_path(path))
    workdir = tmp_path / "job"
    done = run_unpack(uri, "--workdir", str(workdir), "--paths", "relocate")
    assert done.returncode == ExitCode.UNSAFE, done.stderr
    assert why in done.stderr and "Traceback" not in done.stderr
    assert "BIG" not in done.stdout
    assert not (tmp_path / "escaped.bin").exists() and not Path("/tmp/j2c-escaped.bin").exists()
    assert not (workdir / "escaped.bin").exists()
    assert (project / "job.py").read_text() == JOB


def test_a_big_file_that_does_not_match_its_digest_is_corrupt(project: Path, tmp_path: Path):
    store = tmp_path / "store"
    uri = publish_project(project, store, "job.py")
    for blob in (store / "blobs" / "sha256").glob("*.file"):
        os.chmod(blob, 0o600)
        blob.write_bytes(b"replaced")
    done = run_unpack(uri, "--workdir", str(tmp_path / "job"), "--paths", "relocate")
    assert done.returncode == ExitCode.CORRUPT, done.stderr
    assert "does not match the manifest" in done.stderr and "BIG" not in done.stdout


def test_one_digest_with_two_sizes_is_an_invalid_manifest(project: Path, tmp_path: Path):
    def two_sizes(manifest: Manifest) -> Manifest:
        assert manifest.files
        files = [
            f.model_copy(update={"size": 1}) if f.path == "data/copy.bin" else f
            for f in manifest.files
        ]
        return manifest.model_copy(update={"files": files})

    uri = publish_project(project, tmp_path / "store", "job.py", edit=two_sizes)
    done = run_unpack(uri, "--workdir", str(tmp_path / "job"), "--paths", "relocate")
    assert done.returncode == ExitCode.MANIFEST, done.stderr
    assert "is listed with two sizes" in done.stderr


def test_a_file_blob_model_refuses_a_bad_digest() -> None:
    with pytest.raises(ValueError, match="digest"):
        FileBlob(path="a", digest="md5:x", size=1)


def test_big_files_that_cannot_fit_stop_before_downloading(project: Path, tmp_path: Path):
    free = shutil.disk_usage(tmp_path).free

    def huge(manifest: Manifest) -> Manifest:
        assert manifest.files
        files = [
            f.model_copy(update={"size": free + 10**12}) if f.path == "tools/fetch.sh" else f
            for f in manifest.files
        ]
        return manifest.model_copy(update={"files": files})

    workdir = tmp_path / "job"
    uri = publish_project(project, tmp_path / "store", "job.py", edit=huge)
    done = run_unpack(uri, "--workdir", str(workdir), "--paths", "relocate")
    assert done.returncode == ExitCode.LOCAL_IO, done.stderr
    assert "not enough free space for this job's big files" in done.stderr
    assert not list((workdir / "blobs").glob("*.file*")) and "BIG" not in done.stdout
