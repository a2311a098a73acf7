"""j2c-unpack and a code layer in parts (manifest format_version 3): every part fetched, verified
and extracted into the one code folder (or copied from the node cache), big files placed after
all of them; an older reader refuses such a manifest instead of running the first part alone.
Real packer, real ``file://`` store, ``j2c-unpack`` as a subprocess."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from j2c_server.unpack.errors import ExitCode
from j2c_server.wire.manifest import FileBlob, Manifest
from tests.support.projects import SEEN_FILES_PY, backdate, write
from tests.unpack.helpers import publish_project, run_unpack

MIB = 1024 * 1024
PART = 32 * 1024
JOB = (
    SEEN_FILES_PY
    + """\
modes = {d: oct(os.stat(d).st_mode & 0o777) for d in ("pkg", "pkg/b")}
print("FILES", json.dumps(seen, sort_keys=True), json.dumps(modes), flush=True)
"""
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """~300 kB of small modules in a few packages, and a 2 MB data file."""
    root = tmp_path / "lab" / "project"
    write(root / "job.py", JOB)
    for number in range(60):
        lines = [f"value_{number}_{i} = {i * number}  # line {i}\n" for i in range(200)]
        write(root / "pkg" / "abc"[number % 3] / f"m{number:02}.py", "".join(lines))
    (root / "pkg" / "b").chmod(0o750)
    (root / "data").mkdir()
    (root / "data" / "big.bin").write_bytes(hashlib.sha256(b"x").digest() * (2 * MIB // 32))
    backdate(root)
    return root


def expected(project: Path) -> dict[str, str]:
    return {
        path.relative_to(project).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in project.rglob("*")
        if path.is_file()
    }


def seen(stdout: str) -> tuple[dict[str, str], dict[str, str]]:
    line = next(line for line in stdout.splitlines() if line.startswith("FILES "))
    files, modes = line[6:].split(" {", 1)
    return json.loads(files), json.loads("{" + modes)


def manifest_of(store: Path, uri: str) -> Manifest:
    path = store / "manifests" / "sha256" / uri.rsplit("/", 1)[1]
    return Manifest.model_validate_json(path.read_text())


def test_a_job_in_parts_runs_with_every_file(project: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    uri = publish_project(project, store, "job.py", code_part_bytes=PART)
    manifest = manifest_of(store, uri)
    parts = len(manifest.code_layers())
    assert manifest.format_version == 3 and parts >= 3 and manifest.files is not None
    done = run_unpack(uri, "--workdir", str(tmp_path / "job"), "--paths", "relocate")
    assert done.returncode == 0, done.stderr
    files, modes = seen(done.stdout)
    assert files == expected(project)  # every part's files and the big file, intact
    assert modes == {"pkg": "0o755", "pkg/b": "0o750"}
    assert f"code layer part {parts} of {parts}" in done.stderr
    assert f"downloading: {parts} layers" in done.stderr or f"{parts} layers" in done.stderr


def test_a_job_in_parts_runs_from_the_node_cache(project: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    uri = publish_project(project, store, "job.py", code_part_bytes=PART)
    parts = len(manifest_of(store, uri).code_layers())
    cache = tmp_path / "cache"
    for number, want in enumerate((f"0 of {parts} layers", f"{parts} of {parts} layers")):
        done = run_unpack(
            uri, "--workdir", str(tmp_path / f"job{number}"), "--cache-dir", str(cache)
        )
        assert done.returncode == 0, done.stderr
        assert seen(done.stdout)[0] == expected(project)
        assert f"{want} from the cache" in done.stderr
        assert f"{parts} parts" in done.stderr  # code extracted (N entries, M parts)
    assert len(list((cache / "entries").glob("b-*"))) == parts


def test_an_older_reader_refuses_format_version_3(project: Path, tmp_path: Path) -> None:
    """j2c-unpack as it was before parts (reads up to format_version 2)."""
    store = tmp_path / "store"
    uri = publish_project(project, store, "job.py", code_part_bytes=PART)
    older = (
        "import sys; import j2c_server.wire.manifest as models; "
        "models.MANIFEST_FORMAT_VERSION = 2; "
        "from j2c_server.unpack.__main__ import main; sys.exit(main(sys.argv[1:]))"
    )
    workdir = tmp_path / "job"
    done = subprocess.run(
        [sys.executable, "-c", older, uri, "--workdir", str(workdir), "--no-run"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == ExitCode.MANIFEST == 65, done.stderr
    assert "format version 3" in done.stderr and "install a newer j2c" in done.stderr
    assert not (workdir / "code").exists() and "extracting" not in done.stderr


def test_several_code_layers_under_an_older_format_version_are_refused(
    project: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"

    def older(manifest: Manifest) -> Manifest:
        return manifest.model_copy(update={"format_version": 2})

    uri = publish_project(project, store, "job.py", code_part_bytes=PART, edit=older)
    done = run_unpack(uri, "--workdir", str(tmp_path / "job"))
    assert done.returncode == ExitCode.MANIFEST, done.stderr
    assert "two code layers" in done.stderr


def test_a_big_file_over_a_later_parts_file_is_refused(project: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    taken = "pkg/c/m59.py"  # the walk's last module: in the last part

    def collide(manifest: Manifest) -> Manifest:
        assert manifest.files is not None
        blob = manifest.files[0]
        files = [*manifest.files, FileBlob(path=taken, digest=blob.digest, size=blob.size)]
        return manifest.model_copy(update={"files": files})

    uri = publish_project(project, store, "job.py", code_part_bytes=PART, edit=collide)
    last = manifest_of(store, uri).code_layers()[-1]
    assert last.digest != manifest_of(store, uri).code_layers()[0].digest
    done = run_unpack(uri, "--workdir", str(tmp_path / "job"), "--paths", "relocate")
    assert done.returncode == ExitCode.UNSAFE == 68, done.stderr
    assert taken in done.stderr and "FILES" not in done.stdout


@pytest.mark.parametrize("cached", [False, True])
def test_a_part_is_never_written_through_an_earlier_parts_symlink(
    tmp_path: Path, cached: bool
) -> None:
    from j2c_server.wire.manifest import LayerRole
    from tests.unpack.helpers import Entry, blob_path, layer_of, write_layer

    root = tmp_path / "lab" / "project"
    write(root / "job.py", "print('RAN')\n")
    write(root / "real" / "keep.py", "X = 1\n")
    (root / "link").symlink_to("real")
    backdate(root)
    store = tmp_path / "store"

    def through_the_link(manifest: Manifest) -> Manifest:
        blob = write_layer(tmp_path / "evil.tar.zst", [Entry("link/evil.py", data=b"BAD = 1\n")])
        layer = layer_of(blob, LayerRole.code, manifest.code_layers()[0].source_path)
        blob_path(store, layer.digest).parent.mkdir(parents=True, exist_ok=True)
        blob.rename(blob_path(store, layer.digest))
        layers = [*manifest.code_layers(), layer, *manifest.layers[len(manifest.code_layers()) :]]
        return manifest.model_copy(update={"layers": layers, "format_version": 3})

    uri = publish_project(root, store, "job.py", edit=through_the_link)
    options = ["--cache-dir", str(tmp_path / "cache")] if cached else []
    workdir = tmp_path / "job"
    done = run_unpack(uri, "--workdir", str(workdir), "--paths", "relocate", *options)
    assert done.returncode in (ExitCode.UNSAFE, ExitCode.LOCAL_IO), done.stderr
    assert done.returncode == ExitCode.UNSAFE or cached
    assert "RAN" not in done.stdout
    # Not in the job's folders, nor through the link into real/ (a cache entry is its own tree).
    assert not list(workdir.rglob("evil.py")) and not list(root.rglob("evil.py"))
    assert not (workdir / "code" / "real" / "evil.py").exists()
