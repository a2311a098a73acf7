"""``pip install .`` of the source on a machine without Node.js (a compute image's build):
the build stops with a message naming the wheel and ``SKIP_JUPYTER_BUILDER=1``, and with that
switch builds the server and ``j2c-unpack`` alone.

Runs the real build (pip, build isolation, hatchling and this checkout's hook) in a copy of the
checkout's tracked files, with a PATH that has no ``node``. The build requirements come from the
package index pip is configured with; the test is skipped when it cannot be reached.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The checkout's tracked files as they are now (without node_modules or a built
    labextension), as a source download would be."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=False
    )
    if listed.returncode != 0:
        pytest.skip("not a git checkout: no list of the source's files")
    copy = tmp_path_factory.mktemp("src") / "j2c"
    for name in listed.stdout.split("\0"):
        if not name or not (REPO / name).is_file():
            continue
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, copy / name)
    assert not (copy / "j2c_server" / "labextension" / "static").exists()
    return copy


def _build(source: Path, out: Path, **env: str) -> subprocess.CompletedProcess[str]:
    bin_dir = Path(sys.executable).parent
    if shutil.which("node", path=str(bin_dir)):
        pytest.skip(f"{bin_dir} has node: cannot build without it here")
    kept = {k: v for k, v in os.environ.items() if k in ("HOME", "TMPDIR") or k.startswith("PIP_")}
    return subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), "."],
        cwd=source,
        env={**kept, "PATH": str(bin_dir), **env},
        capture_output=True,
        text=True,
        timeout=180,
    )


def _skip_when_offline(result: subprocess.CompletedProcess[str]) -> None:
    text = result.stdout + result.stderr
    if "No matching distribution found" in text or "Could not find a version" in text:
        pytest.skip("the package index is not reachable: no build requirements")


def test_without_node_the_build_says_to_use_the_wheel(source: Path, tmp_path: Path) -> None:
    result = _build(source, tmp_path / "wheels")
    _skip_when_offline(result)
    assert result.returncode != 0
    text = result.stdout + result.stderr
    assert "needs Node.js, which is not on PATH" in text
    assert "install the wheel instead" in text
    assert "SKIP_JUPYTER_BUILDER=1 pip install ." in text
    assert "jlpm" not in text  # stopped before the extension's build was tried


def test_without_node_the_server_and_unpack_build_alone(source: Path, tmp_path: Path) -> None:
    result = _build(source, tmp_path / "wheels", SKIP_JUPYTER_BUILDER="1")
    _skip_when_offline(result)
    assert result.returncode == 0, result.stderr[-3000:]
    [wheel] = (tmp_path / "wheels").glob("j2c-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        [entry_points] = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        scripts = archive.read(entry_points).decode()
    assert "j2c_server/unpack/__main__.py" in names
    assert "j2c-unpack = j2c_server.unpack.__main__:main" in scripts
    assert not [n for n in names if "labextensions" in n and n.endswith(".js")]
