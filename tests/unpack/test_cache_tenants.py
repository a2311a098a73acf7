"""A tenant who shares the node cache's uid (every pod of a namespace runs as one uid, every Ray
job as the worker's, every hub user may be ``jovyan``) edits what the cache holds between two of
another tenant's jobs, as such a tenant can: in place, the same length, mode and mtime put back,
and, where the cache keeps a record of what it wrote, that record rewritten to match (with j2c's
own code: the tenant has it too). The real ``j2c-unpack`` runs the victim's next job; it must run
nothing of the tenant's.

What the manifest pins (the code, the big files, every blob) is checked against it at every use;
a venv entry, relocated for the node, by its fingerprint, whose ctime no process of the tenant
can set back. A tenant who rewrites a venv entry *and* its record is the documented limit: a
cache is one trust domain per uid (docs/operators.md, "Security model").
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from j2c_server.unpack.cache.files import fingerprint
from tests.support.projects import backdate, make_venv, write
from tests.unpack.helpers import publish_project, run_unpack

JOB = """\
import j2c_marker, pathlib
print("MARKER", j2c_marker.shipped, flush=True)
print("DATA", pathlib.Path("data.bin").read_bytes()[:8], flush=True)
print("USER CODE RAN", flush=True)
"""
MIB = 1024 * 1024


def _manifest(uri: str) -> dict[str, object]:
    data: dict[str, object] = json.loads(Path(unquote(urlsplit(uri).path)).read_text())
    return data


def _layer_digest(uri: str, role: str) -> str:
    layers = _manifest(uri)["layers"]
    assert isinstance(layers, list)
    (digest,) = [x["digest"] for x in layers if x["role"] == role]
    return str(digest).removeprefix("sha256:")


def _in_place(path: Path, data: bytes) -> None:
    """``data`` written into ``path``'s own inode, its mode and mtime put back, as a tenant with
    the file's uid can."""
    st = path.stat()
    os.chmod(path, 0o600)
    with path.open("r+b") as handle:
        handle.write(data)
        handle.truncate()
    os.chmod(path, st.st_mode & 0o7777)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _rewrite_record(entry: Path) -> None:
    """The entry's meta.json made to match what it now holds, the way j2c wrote it: a blob's
    recorded stat, a tree's fingerprint."""
    meta_path = entry / "meta.json"
    meta = json.loads(meta_path.read_text())
    if "stat" in meta:
        st = os.lstat(entry / "data.tar.zst")
        meta["stat"] = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]
        meta["stat"].append(st.st_mode)
    if "fingerprint" in meta:
        meta["fingerprint"] = fingerprint(entry / "tree", {os.getuid()})
    _in_place(meta_path, json.dumps(meta).encode())


@pytest.fixture
def victim(tmp_path: Path) -> tuple[Path, Path]:
    """The victim's project (a job reading a venv module and a big data file) and its venv."""
    lab = tmp_path / "lab"
    project = lab / "project"
    write(project / "job.py", JOB)
    (project / "data.bin").write_bytes(b"VICTIM!!" + b"\0" * (2 * MIB))
    venv = make_venv(lab / "venv")
    [site] = venv.glob("lib/python*/site-packages")
    write(site / "j2c_marker.py", "shipped = 'victim'\n")
    return project, venv


def _publish(project: Path, venv: Path, store: Path) -> str:
    backdate(project)
    return publish_project(project, store, "job.py", venv=venv)  # data.bin: a big file


def _run(uri: str, cache: Path, placement: str = "relocate") -> str:
    done = run_unpack(uri, "--cache-dir", str(cache), "--paths", placement)
    assert done.returncode == 0, done.stderr
    assert "USER CODE RAN" in done.stdout
    return done.stdout + done.stderr


def test_the_tenants_code_in_the_cache_with_its_record_rewritten_never_runs(
    victim: tuple[Path, Path], tmp_path: Path
) -> None:
    project, venv = victim
    uri = _publish(project, venv, tmp_path / "store")
    cache = tmp_path / "cache"
    _run(uri, cache)
    # The tenant's own code, packed by j2c as the victim's would be.
    write(project / "job.py", JOB.replace('"USER CODE RAN"', '"USER CODE RAN", "TENANT"'))
    tenants = _publish(project, venv, tmp_path / "tenant-store")
    tenant_blob = (tmp_path / "tenant-store" / "blobs" / "sha256").glob(
        f"{_layer_digest(tenants, 'code')}.tar.zst"
    )
    for entry in (cache / "entries").iterdir():
        for path in sorted(entry.rglob("job.py")):  # a tree of the code, where one is kept
            text = path.read_bytes()
            _in_place(path, text.replace(b'print("MARKER"', b'print("TENANT"'))
            _rewrite_record(entry)
    code_entry = cache / "entries" / f"b-{_layer_digest(uri, 'code')}"
    _in_place(code_entry / "data.tar.zst", next(tenant_blob).read_bytes())
    _rewrite_record(code_entry)

    seen = _run(uri, cache)

    assert "TENANT" not in seen.replace("entry refused", "")
    assert "MARKER victim" in seen


@pytest.mark.parametrize("placement", ["relocate", "original"])
def test_a_venv_file_edited_in_place_with_its_mtime_put_back_never_runs(
    victim: tuple[Path, Path], tmp_path: Path, placement: str
) -> None:
    project, venv = victim
    uri = _publish(project, venv, tmp_path / "store")
    (tmp_path / "lab").rename(tmp_path / "lab moved away")  # the original paths are free
    cache = tmp_path / "cache"
    _run(uri, cache, placement)
    (marker,) = (cache / "entries").glob("venv-*/tree/lib/python*/site-packages/j2c_marker.py")

    _in_place(marker, b"shipped = 'TENANT'\n")  # same length as the victim's line
    seen = _run(uri, cache, placement)

    assert "MARKER victim" in seen and "TENANT" not in seen
    assert "entry refused (its files changed since it was built)" in seen


def test_a_big_file_in_the_cache_with_its_record_rewritten_never_reaches_the_job(
    victim: tuple[Path, Path], tmp_path: Path
) -> None:
    project, venv = victim
    uri = _publish(project, venv, tmp_path / "store")
    cache = tmp_path / "cache"
    _run(uri, cache)
    (entry,) = (cache / "entries").glob("f-*")
    data = (entry / "data.tar.zst").read_bytes()

    _in_place(entry / "data.tar.zst", b"TENANT!!" + data[8:])
    _rewrite_record(entry)
    seen = _run(uri, cache)

    assert "DATA b'VICTIM!!'" in seen and "TENANT" not in seen.replace("entry refused", "")


def test_a_venv_blob_in_the_cache_with_its_record_rewritten_never_builds_an_entry(
    victim: tuple[Path, Path], tmp_path: Path
) -> None:
    project, venv = victim
    uri = _publish(project, venv, tmp_path / "store")
    cache = tmp_path / "cache"
    _run(uri, cache)
    [site] = venv.glob("lib/python*/site-packages")
    write(site / "j2c_marker.py", "shipped = 'TENANT'\n")  # the tenant's venv, packed by j2c
    tenants = _publish(project, venv, tmp_path / "tenant-store")
    tenant_blob = tmp_path / "tenant-store" / "blobs" / "sha256"
    tenant_blob /= f"{_layer_digest(tenants, 'venv')}.tar.zst"
    entry = cache / "entries" / f"b-{_layer_digest(uri, 'venv')}"
    _in_place(entry / "data.tar.zst", tenant_blob.read_bytes())
    _rewrite_record(entry)
    for tree in (cache / "entries").glob("venv-*"):  # evicted: the next job builds it again
        shutil.rmtree(tree)

    seen = _run(uri, cache)

    assert "MARKER victim" in seen and "MARKER TENANT" not in seen
