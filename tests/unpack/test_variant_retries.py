"""A sweep's row with ``retries``: j2c-unpack re-runs the entry point in place while it exits
non-zero, saying so before each re-run; the exit code is the last run's; a run stopped by a
signal is never re-run; a j2c-unpack older than format 7 refuses the manifest."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from j2c_server.unpack.errors import ExitCode
from j2c_server.wire.manifest import MANIFEST_FORMAT_VERSION_RETRIES, Manifest, Variant
from tests.unpack.helpers import UNPACK, publish_project, run_unpack

# Counts its runs in a file of its working copy (kept between re-runs: they are in place);
# fails with CODE until run number PASS_ON, or sleeps when asked to (for a signal).
FLAKY = """\
import pathlib, signal, sys, time
runs = pathlib.Path("runs.txt")
n = int(runs.read_text()) + 1 if runs.exists() else 1
runs.write_text(str(n))
pass_on, code = int(sys.argv[1]), int(sys.argv[2])
print("run", n, flush=True)
if sys.argv[3:] == ["exits-1-on-term"]:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
if sys.argv[3:]:
    time.sleep(120)
sys.exit(0 if n >= pass_on else code)
"""


def _sweep(tmp_path: Path, args: list[str], retries: int | None) -> str:
    project = tmp_path / "project"
    project.mkdir()
    (project / "flaky.py").write_text(FLAKY)

    def rows(manifest: Manifest) -> Manifest:
        row = Variant(index=0, args=args, params={"case": "x"}, retries=retries)
        version = MANIFEST_FORMAT_VERSION_RETRIES if retries else 5
        return manifest.model_copy(update={"variants": [row], "format_version": version})

    return publish_project(project, tmp_path / "store", "flaky.py", edit=rows)


def test_a_variant_that_fails_once_is_re_run_and_succeeds(tmp_path: Path) -> None:
    uri = _sweep(tmp_path, ["2", "5"], retries=2)
    done = run_unpack(uri, "--variant", "0", "--workdir", str(tmp_path / "job"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["run 1", "run 2"]  # in place: run 2 read run 1's count
    assert "j2c: variant: 0 of 1: case=x (up to 2 re-runs while it exits non-zero)" in done.stderr
    assert "j2c: running: variant 0 exited 5; re-running (retry 1 of 2)\n" in done.stderr
    assert "retry 2 of 2" not in done.stderr


def test_retries_exhausted_give_the_last_runs_exit_code(tmp_path: Path) -> None:
    uri = _sweep(tmp_path, ["9", "5"], retries=2)
    done = run_unpack(uri, "--variant", "0", "--workdir", str(tmp_path / "job"))
    assert done.returncode == 5, done.stderr
    assert done.stdout.splitlines() == ["run 1", "run 2", "run 3"]
    assert done.stderr.count("; re-running (retry") == 2
    assert "variant 0 exited 5; re-running (retry 2 of 2)" in done.stderr


def test_without_retries_a_failed_variant_runs_once(tmp_path: Path) -> None:
    uri = _sweep(tmp_path, ["2", "5"], retries=None)
    done = run_unpack(uri, "--variant", "0", "--workdir", str(tmp_path / "job"))
    assert done.returncode == 5 and done.stdout.splitlines() == ["run 1"], done.stderr
    assert "re-running" not in done.stderr


@pytest.mark.parametrize(
    ("mode", "code"), [("sleep", 128 + signal.SIGTERM), ("exits-1-on-term", 1)]
)
def test_a_variant_stopped_by_sigterm_is_not_re_run(tmp_path: Path, mode: str, code: int) -> None:
    uri = _sweep(tmp_path, ["9", "5", mode], retries=3)
    process = subprocess.Popen(
        [*UNPACK, uri, "--variant", "0", "--workdir", str(tmp_path / "job"), "--"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline() == "run 1\n"
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    assert process.returncode == code, err
    assert out == ""  # no second run
    assert f"variant 0 exited {code} after a signal: not re-run" in err
    assert "re-running" not in err


def test_an_older_reader_refuses_a_variant_with_retries(tmp_path: Path) -> None:
    """j2c-unpack as it was before retries (reads up to format_version 6): it would run the
    variant once, so it refuses the manifest instead."""
    uri = _sweep(tmp_path, ["2", "5"], retries=1)
    older = (
        "import sys; import j2c_server.wire.manifest as models; "
        "models.MANIFEST_FORMAT_VERSION = 6; "
        "from j2c_server.unpack.__main__ import main; sys.exit(main(sys.argv[1:]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", older, uri, "--variant", "0", "--workdir", str(tmp_path / "job")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == ExitCode.MANIFEST == 65, done.stderr
    assert "format version 7" in done.stderr and "install a newer j2c" in done.stderr
    assert "run 1" not in done.stdout
