"""A venv runs on its own base interpreter where the node has it (#48 c, the failure of the first
real DDP job of #44): a venv made with ``/usr/bin/python3 -m venv --system-site-packages`` (the
system Python, whose dist-packages hold what the lab installed with apt) sent from a j2c that
runs on another Python. ``j2c-unpack`` rebound the venv to the Python running it, and every
package of the venv's own base was gone (``No module named 'torch'``). A distribution only the
system Python has stands in for torch here: a module in its own site folder, for this test."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.frontends import RunJ2C

SYSTEM = Path("/usr/bin/python3")
MINOR = f"{sys.version_info.major}.{sys.version_info.minor}"


def _system_minor() -> str | None:
    if not SYSTEM.is_file():
        return None
    done = subprocess.run(
        [str(SYSTEM), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
    )
    return done.stdout.strip() or None


@pytest.fixture
def only_the_system_python_has_it() -> Iterator[str]:
    """A module in a site folder of /usr/bin/python3 that this interpreter does not read."""
    if os.geteuid() != 0 or _system_minor() != MINOR or Path(sys.prefix) == Path("/usr"):
        pytest.skip(f"needs root and a system Python {MINOR} other than this one")
    site = Path(f"/usr/local/lib/python{MINOR}/dist-packages")
    site.mkdir(parents=True, exist_ok=True)
    name = f"j2c_only_system_{secrets.token_hex(4)}"
    module = site / f"{name}.py"
    module.write_text("WHERE = 'the system Python'\n")
    try:
        yield name
    finally:
        module.unlink(missing_ok=True)


def test_a_venv_over_another_python_keeps_that_pythons_packages(
    run_j2c: RunJ2C, tmp_path: Path, only_the_system_python_has_it: str
) -> None:
    name = only_the_system_python_has_it
    project = tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text(
        f"import sys, {name}\nprint('from', {name}.WHERE, 'on', sys.version.split()[0])\n"
    )
    venv = project / ".venv"
    made = subprocess.run(
        [str(SYSTEM), "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stderr
    config = tmp_path / "j2c.yaml"  # the supervisor and j2c-unpack: this checkout's code
    config.write_text("scheduler:\n  local:\n    pass_env: [PYTHONPATH]\n")
    sent = run_j2c(
        "submit",
        "train.py",
        "--venv-path",
        str(venv),
        "--verbose",
        cwd=project,
        env={"J2C_CONFIG": str(config)},
    )
    assert sent.returncode == 0, sent.stdout[-1500:] + sent.stderr[-1500:]
    assert "from the system Python on" in sent.stdout
    assert f"bound to its own base Python {MINOR} (/usr/bin/python" in sent.stdout + sent.stderr
