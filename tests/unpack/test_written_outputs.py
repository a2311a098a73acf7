"""What a job writes into its working copy comes back: real ``j2c-unpack`` runs into a
``file://`` store, and the outputs index it writes there.

The job writes where scripts write (relative to its working directory), changes a shipped data
file, leaves bytecode and a secret behind; only what it created or changed comes back, with its
relative path and sha256, within the caps, and never a secret.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.projects import make_venv, write
from tests.unpack.helpers import UNPACK, publish_project, run_unpack

MODEL = bytes(range(256)) * 64

TRAIN = f"""\
import os, pathlib, sys
os.makedirs("models", exist_ok=True)
pathlib.Path("models/a.bin").write_bytes({MODEL!r})
pathlib.Path("metrics.json").write_text('{{"loss": 0.1}}')
with open("data/table.csv", "a") as f:
    f.write("3,4\\n")
import helper  # leaves __pycache__/helper.*.pyc
pathlib.Path(".env").write_text("TOKEN=abc\\n")
# A private key, put together here so that the packer does not find one in this script.
pathlib.Path("notes.txt").write_text("-----BEGIN RSA " + "PRIVATE KEY-----\\n" + "A" * 64)
pathlib.Path("big.bin").write_bytes(b"x" * 3_000_000)
os.symlink("/etc/hostname", "link.txt")
pathlib.Path(os.environ["J2C_OUTPUT_DIR"], "report.txt").write_text("report")
os.makedirs(".cache")  # a tool's cache in the working copy: skipped
pathlib.Path(".cache/scratch.txt").write_text("scratch")
os.makedirs(os.path.join(os.environ["J2C_OUTPUT_DIR"], ".cache"))  # the output dir keeps all
pathlib.Path(os.environ["J2C_OUTPUT_DIR"], ".cache", "kept.txt").write_text("kept")
"""


def _project(root: Path) -> Path:
    project = root / "lab" / "project"
    write(project / "train.py", TRAIN)
    write(project / "helper.py", "X = 1\n")
    write(project / "data" / "table.csv", "a,b\n1,2\n")
    write(project / "data" / "untouched.csv", "c\n5\n")
    return project


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_created_and_changed_files_come_back_with_their_paths_and_no_secret(
    tmp_path: Path,
) -> None:
    project = _project(tmp_path)
    uri = publish_project(
        project, tmp_path / "store", "train.py", venv=make_venv(tmp_path / "lab" / "venv")
    )
    outputs = tmp_path / "out" / "jobs" / "j" / "outputs"
    done = run_unpack(
        uri,
        "--workdir",
        str(tmp_path / "job"),
        "--paths",
        "relocate",
        "--output-uri",
        outputs.as_uri(),
        "--outputs-max-file-mb",
        "2",
    )
    assert done.returncode == 0, done.stderr
    raw = (outputs / ".j2c-outputs.json").read_bytes()
    index = json.loads(raw)
    files = {item["name"]: item for item in index["files"]}
    assert sorted(files) == [
        ".cache/kept.txt",
        "data/table.csv",
        "metrics.json",
        "models/a.bin",
        "report.txt",
    ]
    assert files["models/a.bin"]["sha256"] == _sha(MODEL)
    assert files["models/a.bin"]["size"] == len(MODEL)
    assert (outputs / "models" / "a.bin").read_bytes() == MODEL
    assert (outputs / "data" / "table.csv").read_text() == "a,b\n1,2\n3,4\n"
    left = {item["name"]: item["reason"] for item in index["left_out"]}
    assert left == {
        "big.bin": "3.0 MB over outputs.max_file_mb (2 MB)",
        ".env": "is a secret by its name (.env*)",
        "notes.txt": "is a secret by its content (private key block)",
    }
    assert index["left_out"][0]["name"] == "big.bin"  # largest first
    for absent in (".env", "notes.txt", "big.bin", "link.txt", "__pycache__"):
        assert not (outputs / absent).exists(), absent
    assert index["final"] is True
    assert f"j2c: outputs: index sha256:{_sha(raw)}" in done.stderr
    assert "j2c: outputs: left out: big.bin 3.0 MB over outputs.max_file_mb (2 MB)" in done.stderr


def test_the_total_cap_leaves_out_the_largest(tmp_path: Path) -> None:
    project = _project(tmp_path)
    uri = publish_project(project, tmp_path / "store", "train.py")
    outputs = tmp_path / "out"
    done = run_unpack(
        uri,
        "--workdir",
        str(tmp_path / "job"),
        "--output-uri",
        outputs.as_uri(),
        "--outputs-max-total-mb",
        "0.01",
    )
    assert done.returncode == 0, done.stderr
    index = json.loads((outputs / ".j2c-outputs.json").read_text())
    names = [item["name"] for item in index["files"]]
    assert names == [".cache/kept.txt", "data/table.csv", "metrics.json", "report.txt"]
    left = {item["name"]: item["reason"] for item in index["left_out"]}
    assert left["models/a.bin"].startswith("16.4 kB over outputs.max_total_mb (0.01 MB, ")
    assert left["big.bin"].startswith("3.0 MB over outputs.max_total_mb")


CHECKPOINTS = """\
import os, pathlib, sys, time
os.makedirs("ckpt", exist_ok=True)
step = 0
while True:
    data = bytes([step % 256]) * (100_000 + step)
    tmp = pathlib.Path(f"ckpt/.step-{step}.tmp")
    tmp.write_bytes(data)
    tmp.rename(f"ckpt/step-{step}.bin")
    print("saved", step, flush=True)
    step += 1
    time.sleep(0.3)
"""


def test_checkpoints_written_before_a_sigterm_are_synced(tmp_path: Path) -> None:
    project = tmp_path / "lab" / "project"
    write(project / "loop.py", CHECKPOINTS)
    uri = publish_project(project, tmp_path / "store", "loop.py")
    outputs = tmp_path / "out"
    argv = [*UNPACK, uri, "--workdir", str(tmp_path / "job"), "--output-uri", outputs.as_uri()]
    argv += ["--outputs-sync-minutes", "0.01", "--"]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (outputs / ".j2c-outputs.json").exists():  # a sync while it runs
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.1)
    time.sleep(1)
    process.send_signal(signal.SIGTERM)
    _out, err = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM, err
    assert "j2c: outputs: synced while running: " in err
    index = json.loads((outputs / ".j2c-outputs.json").read_text())
    names = [item["name"] for item in index["files"]]
    assert len(names) >= 3 and all(name.startswith("ckpt/step-") for name in names), names
    for item in index["files"]:
        step = int(item["name"].removeprefix("ckpt/step-").removesuffix(".bin"))
        data = (outputs / item["name"]).read_bytes()
        assert data == bytes([step % 256]) * (100_000 + step)
        assert item["sha256"] == _sha(data)
    assert index["final"] is True


@pytest.mark.skipif(sys.platform != "linux", reason="inode numbers as Linux gives them")
def test_the_change_scan_of_an_unchanged_tree_finds_nothing(tmp_path: Path) -> None:
    from j2c_server.unpack.written import take_snapshot, written_files

    for index in range(50):
        write(tmp_path / "code" / f"d{index % 5}" / f"f{index}.py", "x = 1\n")
    os.symlink("d0", tmp_path / "code" / "link")
    snapshot = take_snapshot(tmp_path / "code")
    assert len(snapshot) == 50
    assert written_files(tmp_path / "code", snapshot) == []
    (tmp_path / "code" / "d1" / "f1.py").write_text("x = 2\n")
    assert [item.name for item in written_files(tmp_path / "code", snapshot)] == ["d1/f1.py"]


GRACEFUL = """\
import pathlib, signal, sys, time
def stop(signum, frame):
    time.sleep(2)  # saving a last checkpoint, say
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
pathlib.Path("model.bin").write_bytes(b"weights")
print("ready", flush=True)
time.sleep(60)
"""


def test_sigterm_starts_a_sync_while_the_job_shuts_down(tmp_path: Path) -> None:
    project = tmp_path / "lab" / "project"
    write(project / "graceful.py", GRACEFUL)
    uri = publish_project(project, tmp_path / "store", "graceful.py")
    outputs = tmp_path / "out"
    argv = [*UNPACK, uri, "--workdir", str(tmp_path / "job"), "--output-uri", outputs.as_uri()]
    argv += ["--outputs-sync-minutes", "0", "--"]  # no periodic syncs: only the signal's
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    assert process.stdout.readline() == "ready\n"
    process.send_signal(signal.SIGTERM)
    _out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    synced = err.index("j2c: outputs: synced while running: 1 new or changed files")
    assert synced < err.index("j2c: running: exit code 0")  # before the job had ended
    assert "0 uploaded now" in err  # the final upload found nothing left to send
    assert (outputs / "model.bin").read_bytes() == b"weights"
