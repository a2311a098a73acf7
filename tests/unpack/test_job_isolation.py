"""A job sees only what it was sent: original paths only where no other user can change them,
no copy left for the next job, room checked before downloading, absurd archives refused cleanly.

The other local user is simulated with a folder owned by uid 12345 (the tests run as root, and
j2c-unpack trusts folders owned by the job's user or root)."""

from __future__ import annotations

import contextlib
import fcntl
import http.server
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from j2c_server.unpack.errors import ExitCode
from j2c_server.wire.manifest import EntryPoint, LayerRole, Manifest
from tests.support.other_users import checkout_closed_to_others
from tests.unpack.conftest import SmallJob
from tests.unpack.helpers import UNPACK, Entry, publish_layers, run_unpack

OTHER_USER = 12345
SHOW_WHERE = b"import pathlib\nprint('RAN FROM', pathlib.Path(__file__).resolve().parent)\n"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="simulating another user needs root")


def publish(store: Path, source_root: Path, *entries: Entry) -> str:
    """A code-only job (runs with this interpreter) whose code came from ``source_root/code``."""
    return publish_layers(
        store,
        {LayerRole.code: [Entry("main.py", data=SHOW_WHERE), *entries]},
        entry=EntryPoint(kind="script", target="main.py"),
        source_root=str(source_root),
    )


def ran_from(stdout: str) -> Path:
    (line,) = [line for line in stdout.splitlines() if line.startswith("RAN FROM ")]
    return Path(line.removeprefix("RAN FROM "))


def folder(path: Path, mode: int, owner: int = 0) -> Path:
    path.mkdir(parents=True)
    os.chown(path, owner, owner)
    path.chmod(mode)
    return path


@pytest.fixture
def shared_tmp(tmp_path: Path) -> Path:
    """Like /tmp: world-writable and sticky."""
    return folder(tmp_path / "tmp", 0o1777)


# --------------------------------------------------------------------------- original paths


def test_an_empty_world_writable_folder_of_another_user_is_not_used(store: Path, tmp_path: Path):
    trap = folder(tmp_path / "lab" / "code", 0o777, owner=OTHER_USER)
    workdir = tmp_path / "job"
    done = run_unpack(publish(store, tmp_path / "lab"), "--workdir", str(workdir))
    assert done.returncode == 0, done.stderr
    assert ran_from(done.stdout) == workdir / "code"
    assert f"{trap} is not private to this job's user ({trap} belongs to uid 12345)" in done.stderr
    assert list(trap.iterdir()) == []


def test_a_source_path_in_a_folder_others_may_write_is_not_used(store: Path, tmp_path: Path):
    # Not sticky: another user could rename the extracted code away and put his own there.
    open_folder = folder(tmp_path / "open", 0o777)
    workdir = tmp_path / "job"
    done = run_unpack(publish(store, open_folder / "lab"), "--workdir", str(workdir))
    assert done.returncode == 0, done.stderr
    assert ran_from(done.stdout) == workdir / "code"
    assert f"({open_folder} is writable by others)" in done.stderr
    assert list(open_folder.iterdir()) == []


def test_a_folder_another_user_made_in_a_sticky_folder_is_not_used(
    store: Path, tmp_path: Path, shared_tmp: Path
):
    theirs = folder(shared_tmp / "lab", 0o755, owner=OTHER_USER)
    workdir = tmp_path / "job"
    done = run_unpack(publish(store, theirs), "--workdir", str(workdir))
    assert done.returncode == 0, done.stderr
    assert ran_from(done.stdout) == workdir / "code"
    assert f"({theirs} belongs to uid 12345)" in done.stderr
    assert list(theirs.iterdir()) == []


def test_original_paths_in_a_sticky_folder_are_used_then_removed(
    store: Path, tmp_path: Path, shared_tmp: Path
):
    source = shared_tmp / "lab" / "project"
    done = run_unpack(publish(store, source), "--workdir", str(tmp_path / "job"))
    assert done.returncode == 0, done.stderr
    assert ran_from(done.stdout) == source / "code"
    assert "(original paths)" in done.stderr
    assert list(shared_tmp.iterdir()) == []  # every folder the job made is gone


def test_an_operator_may_trust_original_paths(store: Path, tmp_path: Path):
    trap = folder(tmp_path / "lab" / "code", 0o777, owner=OTHER_USER)
    uri = publish(store, tmp_path / "lab")
    by_flag = run_unpack(uri, "--workdir", str(tmp_path / "a"), "--trust-original-paths")
    assert by_flag.returncode == 0, by_flag.stderr
    assert ran_from(by_flag.stdout) == trap
    by_env = run_unpack(
        uri, "--workdir", str(tmp_path / "b"), env={**os.environ, "J2C_UNPACK_TRUST_PATHS": "1"}
    )
    assert ran_from(by_env.stdout) == trap
    assert "original paths trusted without ownership checks" in by_env.stderr
    assert list(trap.iterdir()) == []  # adopted, so emptied again, not removed


# --------------------------------------------------------------------------- no leftovers

READ_DATA = b"""\
import sys
print('DATA', open(sys.argv[1]).read(), flush=True)
"""


def test_a_second_job_never_reads_the_first_jobs_copy(store: Path, tmp_path: Path):
    source = tmp_path / "lab"
    data = source / "code" / "data.txt"  # the job reads it by its absolute path

    def job(text: bytes, workdir: str) -> str:
        uri = publish_layers(
            store,
            {LayerRole.code: [Entry("main.py", data=READ_DATA), Entry("data.txt", data=text)]},
            entry=EntryPoint(kind="script", target="main.py"),
            source_root=str(source),
        )
        done = run_unpack(uri, "--workdir", str(tmp_path / workdir), user_args=[str(data)])
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "DATA one" in job(b"one", "first")
    left_behind = source.exists()
    if left_behind:  # what another user could do to a copy left behind
        data.write_text("replaced by someone else")
    assert "DATA two" in job(b"two", "second")
    assert not left_behind and not source.exists()


def test_a_restarted_job_replaces_the_copy_its_killed_run_left(store: Path, tmp_path: Path):
    # --no-run leaves the prepared copy behind, as a run killed before it could clean up does.
    source = tmp_path / "lab"
    uri = publish(store, source)
    workdir = str(tmp_path / "job")
    prepared = run_unpack(uri, "--workdir", workdir, "--no-run")
    assert prepared.returncode == 0, prepared.stderr
    main = source / "code" / "main.py"
    main.write_text("print('RAN FROM', 'a stale copy')\n")
    again = run_unpack(uri, "--workdir", workdir)
    assert again.returncode == 0, again.stderr
    assert ran_from(again.stdout) == source / "code"
    assert "removing the original-path copies a previous run of this workdir left" in again.stderr
    assert not source.exists()


def test_only_what_the_job_made_is_removed_and_an_adopted_folder_is_emptied(
    store: Path, tmp_path: Path
):
    source = tmp_path / "lab"
    adopted = source / "code"
    adopted.mkdir(parents=True)
    (source / "notes.txt").write_text("keep")
    done = run_unpack(publish(store, source), "--workdir", str(tmp_path / "job"))
    assert done.returncode == 0, done.stderr
    assert ran_from(done.stdout) == adopted
    assert sorted(p.name for p in source.iterdir()) == ["code", "notes.txt"]
    assert list(adopted.iterdir()) == []


# --------------------------------------------------------------------------- room and size


def claim_unpacked_size(size: int):
    def edit(manifest: Manifest) -> Manifest:
        layers = [
            layer.model_copy(update={"unpacked_size": size})
            if layer.role == LayerRole.code
            else layer
            for layer in manifest.layers
        ]
        return manifest.model_copy(update={"layers": layers})

    return edit


def test_a_job_larger_than_the_free_space_stops_before_downloading(
    small_job: SmallJob, tmp_path: Path
):
    workdir = tmp_path / "job"
    free = shutil.disk_usage(tmp_path).free
    uri = small_job.publish(edit=claim_unpacked_size(free + 10**12))
    done = run_unpack(uri, "--workdir", str(workdir), "--paths", "relocate")
    assert done.returncode == ExitCode.LOCAL_IO
    assert f"not enough free space for this job at {workdir}" in done.stderr
    assert "are free" in done.stderr
    assert "USER CODE RAN" not in done.stdout
    assert not (workdir / "blobs").exists() or list((workdir / "blobs").iterdir()) == []


def test_a_layer_larger_than_its_manifest_says_is_corrupt(small_job: SmallJob, tmp_path: Path):
    workdir = tmp_path / "job"
    done = run_unpack(small_job.publish(edit=claim_unpacked_size(1)), "--workdir", str(workdir))
    assert done.returncode == ExitCode.CORRUPT
    assert "more than the 1 bytes of files its manifest states" in done.stderr
    assert "USER CODE RAN" not in done.stdout


def test_a_layer_1100_folders_deep_is_refused_as_unsafe(store: Path, tmp_path: Path):
    workdir = tmp_path / "job"
    deep = Entry("d/" * 1100 + "f.txt", data=b"x")
    done = run_unpack(publish(store, tmp_path / "lab", deep), "--workdir", str(workdir))
    assert done.returncode == ExitCode.UNSAFE, done.stderr
    assert "is 1101 folders deep" in done.stderr
    assert "Traceback" not in done.stderr and "RAN FROM" not in done.stdout
    assert not (tmp_path / "lab").exists()


def test_an_empty_folder_another_job_is_using_is_not_taken(store: Path, tmp_path: Path):
    # Two runs of a sweep on one node: the second must not extract into the first one's folder.
    taken = tmp_path / "lab" / "code"
    taken.mkdir(parents=True)
    held = os.open(taken, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        done = run_unpack(publish(store, tmp_path / "lab"), "--workdir", str(tmp_path / "job"))
    finally:
        os.close(held)
    assert done.returncode == 0, done.stderr
    assert ran_from(done.stdout) == tmp_path / "job" / "code"
    assert f"{taken} is in use by another job" in done.stderr
    assert taken.is_dir() and list(taken.iterdir()) == []


JOB_USER = 23456


SETPRIV = shutil.which("setpriv")  # util-linux: run a command as another uid


@pytest.fixture
def outside_root_tmp() -> Iterator[Path]:
    """A folder the job's (non-root) user can reach: pytest's own is private to root."""
    base = Path(tempfile.mkdtemp(prefix="j2c-isolation-", dir="/tmp"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base)


@pytest.mark.skipif(SETPRIV is None, reason="needs setpriv (util-linux)")
@pytest.mark.skipif(bool(checkout_closed_to_others()), reason=str(checkout_closed_to_others()))
def test_a_non_root_job_user_gets_original_paths_only_in_its_own_folders(
    outside_root_tmp: Path,
):
    base = outside_root_tmp
    store = folder(base / "store", 0o755)
    home = folder(base / "home", 0o755, owner=JOB_USER)
    shared = folder(base / "shared", 0o777, owner=OTHER_USER)  # writable by the job, not its own

    def run(source: Path, workdir: str) -> subprocess.CompletedProcess[str]:
        uri = publish(store, source)
        for path in store.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)
        as_job_user = [str(SETPRIV), f"--reuid={JOB_USER}", f"--regid={JOB_USER}", "--clear-groups"]
        return subprocess.run(
            [*as_job_user, *UNPACK, uri, "--workdir", str(home / workdir), "--no-run"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    # --no-run: the job's user cannot start this test's interpreter (it lives under /root).
    own = run(home / "project", "a")
    assert own.returncode == 0, own.stderr
    assert "(original paths)" in own.stderr
    assert (home / "project" / "code" / "main.py").stat().st_uid == JOB_USER
    theirs = run(shared / "project", "b")
    assert theirs.returncode == 0, theirs.stderr
    assert f"({shared} belongs to uid {OTHER_USER})" in theirs.stderr
    assert (home / "b" / "code" / "main.py").is_file()
    assert list(shared.iterdir()) == []


class _Endless(http.server.BaseHTTPRequestHandler):
    """A store that sends a layer slowly and forever: the job is still downloading."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(10**12))
        self.end_headers()
        with contextlib.suppress(OSError):
            while not getattr(self.server, "closing", False):
                self.wfile.write(bytes(1024 * 1024))
                time.sleep(0.05)

    def log_message(self, *_: object) -> None:
        pass


def test_sigterm_while_downloading_removes_the_original_path_copies(store: Path, tmp_path: Path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Endless)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    source = tmp_path / "lab"
    uri = publish(store, source)
    manifest = Manifest.model_validate_json(Path(uri.removeprefix("file://")).read_bytes())
    url = f"http://127.0.0.1:{server.server_address[1]}/layer"
    slow = manifest.model_copy(
        update={"layers": [layer.model_copy(update={"url": url}) for layer in manifest.layers]}
    )
    path = store / "jobs" / "slow" / "manifest.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(slow.canonical_json())
    job = subprocess.Popen(
        [*UNPACK, path.as_uri(), "--workdir", str(tmp_path / "job")],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert job.stderr is not None
        seen = ""
        while "j2c: downloading: 1 layer," not in seen:
            seen += job.stderr.readline()
        assert (source / "code").is_dir()  # placed and waiting for its layer
        job.send_signal(signal.SIGTERM)
        rest = job.stderr.read()
        assert job.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        server.closing = True  # type: ignore[attr-defined]
        server.shutdown()
        job.kill()
    assert "stopped by SIGTERM" in rest
    assert not source.exists()
