"""Signals sent to j2c-unpack reach the whole job (the training loop and its workers); the
job's exit code comes back; a job never outlives a killed j2c-unpack."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from j2c_server.wire.manifest import EntryPoint, LayerRole
from tests.unpack.helpers import UNPACK, Entry, publish_layers

TRAINING = """\
import os, signal, subprocess, sys, time

def on_term(signum, frame):
    print("training loop got", signal.Signals(signum).name, flush=True)
    sys.exit(42)

if sys.argv[1] == "handles-term":
    signal.signal(signal.SIGTERM, on_term)
if sys.argv[1] == "has-a-worker":
    worker_py = os.path.join(os.path.dirname(__file__), "worker.py")
    worker = subprocess.Popen([sys.executable, worker_py, sys.argv[2]], stdout=subprocess.PIPE)
    worker.stdout.readline()  # its handler is installed
try:
    print("ready", os.getpid(), flush=True)
    time.sleep(120)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(7)
"""

WORKER = """\
import signal, sys, time

def on_term(signum, frame):
    open(sys.argv[1], "w").write("got it")
    sys.exit(0)

signal.signal(signal.SIGTERM, on_term)
print("worker ready", flush=True)
time.sleep(120)
"""


@pytest.fixture
def training_job(store: Path, tmp_path: Path) -> str:
    return publish_layers(
        store,
        {
            LayerRole.code: [
                Entry("train.py", data=TRAINING.encode()),
                Entry("worker.py", data=WORKER.encode()),
            ]
        },
        entry=EntryPoint(kind="script", target="train.py"),
        source_root=str(tmp_path / "lab"),
    )


def start(manifest_uri: str, tmp_path: Path, *args: str) -> tuple[subprocess.Popen[str], int]:
    """j2c-unpack running the job, once the job says it is ready; and the job's pid."""
    process = subprocess.Popen(
        [*UNPACK, manifest_uri, "--workdir", str(tmp_path / "job"), "--", *args],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("ready"):
            return process, int(line.split()[1])
    raise AssertionError(f"the job never became ready (exit code {process.wait()})")


def test_sigterm_reaches_the_training_loop_and_its_exit_code_comes_back(
    training_job: str, tmp_path: Path
):
    process, _ = start(training_job, tmp_path, "handles-term")
    process.send_signal(signal.SIGTERM)
    out, _ = process.communicate(timeout=30)
    assert "training loop got SIGTERM" in out
    assert process.returncode == 42


def test_a_job_ended_by_sigterm_exits_with_128_plus_15(training_job: str, tmp_path: Path):
    process, _ = start(training_job, tmp_path, "default")
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=30)
    assert process.returncode == 128 + signal.SIGTERM


def test_sigterm_reaches_the_workers_the_training_loop_started(training_job: str, tmp_path: Path):
    flag = tmp_path / "worker-got-sigterm"
    process, _ = start(training_job, tmp_path, "has-a-worker", str(flag))
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=30)
    deadline = time.monotonic() + 10
    while not flag.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert flag.read_text() == "got it"


def test_sigint_reaches_the_training_loop_as_keyboard_interrupt(training_job: str, tmp_path: Path):
    process, _ = start(training_job, tmp_path, "default")
    process.send_signal(signal.SIGINT)
    out, _ = process.communicate(timeout=30)
    assert "interrupted" in out
    assert process.returncode == 7


def test_the_job_dies_when_j2c_unpack_is_killed(training_job: str, tmp_path: Path):
    process, job_pid = start(training_job, tmp_path, "handles-term")
    process.kill()
    process.wait(timeout=30)
    deadline = time.monotonic() + 10
    while alive(job_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(job_pid)


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_the_job_runs_in_its_own_process_group(training_job: str, tmp_path: Path):
    process, job_pid = start(training_job, tmp_path, "default")
    assert os.getpgid(job_pid) == job_pid  # its own process group, apart from j2c-unpack's
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=30)
