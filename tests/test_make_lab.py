"""``make lab`` on a fresh clone: the README's first command sends the example job, which
succeeds, and then serves JupyterLab.

The repository is cloned (HEAD: commit before relying on this) into a temporary folder and
``scripts/lab.sh`` — what ``make lab`` runs after ``scripts/setup.sh`` — runs there unchanged.
Only the set-up is shared: the clone's ``.venv`` links to the venv running the tests (setting
it up again takes minutes), and ``PYTHONPATH`` makes that venv import the clone's code. The
test stops the server by its PID once ``/lab`` answers 200.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TOKEN = "j2c-make-lab-test"
LIMIT_S = 120


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _lab_answers(port: int) -> int | None:
    try:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{port}/lab?token={TOKEN}", timeout=5
        ) as response:
            status: int = response.status
            return status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.fail(f"{REPO} is not a git checkout: make lab's fresh-clone test needs one")
    target = tmp_path / "clone"
    subprocess.run(
        ["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(target)],
        check=True,
        timeout=60,
    )
    (target / ".venv").symlink_to(Path(sys.prefix))
    return target


def test_make_lab_on_a_fresh_clone_runs_the_example_and_serves_lab(
    clone: Path, tmp_path: Path
) -> None:
    port = _free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("J2C_")},
        "PYTHONPATH": str(clone),
        "J2C_DATA_DIR": str(tmp_path / "j2c-data"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
        "JUPYTER_TOKEN": TOKEN,
        "LAB_PORT": str(port),
    }
    env.pop("VIRTUAL_ENV", None)
    log = tmp_path / "lab.log"
    with log.open("w") as out:
        lab = subprocess.Popen(
            ["bash", "scripts/lab.sh"],
            cwd=clone,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + LIMIT_S
        status = None
        while time.monotonic() < deadline and lab.poll() is None:
            if "serving JupyterLab" in log.read_text():
                status = _lab_answers(port)
                if status == 200:
                    break
            time.sleep(0.5)
        text = log.read_text()
        assert lab.poll() is None, f"scripts/lab.sh exited with {lab.returncode}:\n{text[-3000:]}"
        assert status == 200, f"/lab answered {status}:\n{text[-3000:]}"
        assert "succeeded" in text and "epoch 5/5" in text, text[-3000:]
        # The URL it prints logs in, as `jupyter lab`'s own does.
        assert f"http://127.0.0.1:{port}/lab?token={TOKEN}" in text, text[-3000:]
        # The workspace is the clone's .lab/, and its project is the example, not the clone.
        project = clone / ".lab" / "digits"
        assert (project / "train.py").is_file()
        # The example notebook sends and runs from that workspace, as its text promises.
        sent = subprocess.run(
            [
                str(Path(sys.prefix) / "bin" / "j2c"),
                "submit",
                "explore.ipynb",
                "--venv-path",
                ".venv",
            ],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=LIMIT_S,
        )
        assert sent.returncode == 0, sent.stdout + sent.stderr
        assert "class counts:" in sent.stdout, sent.stdout
        assert "notebook runner" not in sent.stderr, sent.stderr  # nothing lacking
    finally:
        if lab.poll() is None:
            os.kill(lab.pid, signal.SIGTERM)  # lab.sh execs jupyter lab: this PID is the server
            try:
                lab.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.kill(lab.pid, signal.SIGKILL)
                lab.wait(timeout=10)
