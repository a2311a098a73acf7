"""A realistic lab project for the end-to-end tests, built with real tools (venv, pip).

``<root>/lab home/project`` (the space makes pip write console scripts in its
``#!/bin/sh`` + ``'''exec'`` form) holds:

- ``.venv``: ``python -m venv --system-site-packages``, with numpy installed into it by pip
  (a compiled package; ``--ignore-installed`` because the base interpreter may have its own),
  ``hellocli`` (a regular install with a console script, ``hello``), and two editable installs
  of packages inside the project: ``mylib`` (src layout: a path ``.pth``) and ``flatpkg`` (flat
  layout: an ``__editable__*finder.py``);
- ``train.py``: imports all of them, calls ``hello``, prints a JSON report, and exits with its
  last argument when that is a number.

pip reads the package index configured for this machine (numpy, and setuptools for building).
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

TRAIN_PY = """\
import json, os, subprocess, sys

import flatpkg
import mylib
import numpy

hello = subprocess.run(["hello"], capture_output=True, text=True, check=True).stdout.strip()
print(json.dumps({
    "prefix": sys.prefix,
    "numpy": numpy.__file__,
    "numpy_sum": int(numpy.arange(10).sum()),
    "mylib": mylib.__file__,
    "flatpkg": flatpkg.__file__,
    "hello": hello,
    "args": sys.argv[1:],
    "cwd": os.getcwd(),
    "output_dir": os.environ.get("J2C_OUTPUT_DIR"),
    "virtual_env": os.environ.get("VIRTUAL_ENV"),
}), flush=True)
sys.exit(int(sys.argv[-1]) if sys.argv[-1:] and sys.argv[-1].isdigit() else 0)
"""

SETUP = """\
[project]
name = "{name}"
version = "0.1"
{extra}
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"
"""


@dataclass(frozen=True)
class Lab:
    project: Path
    venv: Path


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def make_lab(root: Path) -> Lab:
    project = root / "lab home" / "project"
    venv = project / ".venv"
    _write(project / "train.py", TRAIN_PY)
    src_setup = '[tool.setuptools.packages.find]\nwhere = ["src"]\n'
    _write(project / "pyproject.toml", SETUP.format(name="mylib", extra=src_setup))
    _write(project / "src" / "mylib" / "__init__.py", "VALUE = 42\n")
    flat = project / "libs" / "flatpkg"
    _write(flat / "pyproject.toml", SETUP.format(name="flatpkg", extra=""))
    _write(flat / "flatpkg" / "__init__.py", "NAME = 'flat'\n")
    tool = root / "tools" / "hellocli"
    scripts = '[project.scripts]\nhello = "hellocli:main"\n'
    _write(tool / "pyproject.toml", SETUP.format(name="hellocli", extra=scripts))
    _write(
        tool / "hellocli" / "__init__.py",
        "import sys\n\ndef main():\n    print('hello from', sys.prefix)\n",
    )
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps"]
    subprocess.run([*pip, str(tool), "-e", str(project), "-e", str(flat)], check=True)
    subprocess.run([*pip, "--ignore-installed", "numpy"], check=True)
    return Lab(project, venv)
