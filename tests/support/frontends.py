"""Fixtures of the CLI and magic tests: the real ``j2c`` console script in subprocesses, a demo
project and a small venv, all on throw-away data and config dirs."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

J2C = str(Path(sys.executable).with_name("j2c"))
RunJ2C = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    """The environment of every ``j2c`` subprocess: own data dir, no user config, no venv."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("J2C_")}
    env.pop("VIRTUAL_ENV", None)
    env["J2C_DATA_DIR"] = str(tmp_path / "j2c-data")
    env["JUPYTER_CONFIG_DIR"] = str(tmp_path / "jupyter-config")
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.fixture
def run_j2c(cli_env: dict[str, str], tmp_path: Path) -> RunJ2C:
    def run(
        *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [J2C, *args],
            cwd=cwd or tmp_path,
            env={**cli_env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run


@pytest.fixture(scope="session")
def cli_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real ``--system-site-packages`` venv, small enough to pack in a blink."""
    path = tmp_path_factory.mktemp("venvs") / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(path)],
        check=True,
    )
    return path


@pytest.fixture
def cli_project(tmp_path: Path) -> Path:
    """A small project: a script that prints numbered lines, echoes its arguments and exits
    with the code it is given."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'demo'\nversion = '0'\n")
    (root / "train.py").write_text(
        "import sys, time\n"
        "args = sys.argv[1:]\n"
        "code = int(args[args.index('--exit') + 1]) if '--exit' in args else 0\n"
        "lines = int(args[args.index('--lines') + 1]) if '--lines' in args else 3\n"
        "sleep = float(args[args.index('--sleep') + 1]) if '--sleep' in args else 0\n"
        "print('args', args, flush=True)\n"
        "for i in range(lines):\n"
        "    print(f'line {i}', flush=True)\n"
        "    time.sleep(sleep)\n"
        "print('oops', file=sys.stderr, flush=True)\n"
        "sys.exit(code)\n"
    )
    return root


@pytest.fixture(scope="session")
def notebook_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv that can run notebooks: like a lab image, where nbclient and ipykernel are system
    packages, its site-packages reach this interpreter's (by a ``.pth`` file)."""
    import site
    import sysconfig

    path = tmp_path_factory.mktemp("venvs") / "nbvenv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(path)],
        check=True,
    )
    purelib = sysconfig.get_path("purelib", vars={"base": str(path), "platbase": str(path)})
    ours = site.getsitepackages()[0]
    Path(purelib, "lab-image.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    return path
