"""Build real sample projects and real ``--system-site-packages`` venvs for tests (fast, offline).

- :func:`make_project`: a data scientist's folder: ``train.py``, a notebook, a package runnable
  with ``-m``, data, a ``.gitignore`` with ignored outputs, junk (``.git``, ``__pycache__``,
  ``.ipynb_checkpoints``) and secrets (``.env``, a private key, cloud credentials).
- :func:`make_venv`: ``python -m venv --system-site-packages --without-pip`` plus small pure
  distributions written the way pip installs them (package, ``*.dist-info`` with RECORD, a
  console script, compiled bytecode), in well under a second.

Files get a fixed mtime in the past (:data:`OLD_MTIME`), as a project and a venv have long
before anyone submits them; the packer only records fingerprints of layers whose files are not
seconds old (see ``j2c_server/pack/fingerprint.py``). Call :func:`backdate` after changing files
when a test needs a layer to be recognised as unchanged later.
"""

from __future__ import annotations

import compileall
import json
import os
import subprocess
import sys
from pathlib import Path

OLD_MTIME = 1_700_000_000  # 2023-11-14, seconds since the epoch

TRAIN_PY = """import sys

print("training with", sys.argv[1:], flush=True)
"""

NOTEBOOK = {
    "cells": [
        {
            "cell_type": "code",
            "execution_count": None,
            "metadata": {},
            "outputs": [],
            "source": ["print('hello from the notebook')\n"],
        }
    ],
    "metadata": {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
    },
    "nbformat": 4,
    "nbformat_minor": 5,
}

SECRETS = (".env", ".env.local", "keys/id_rsa", "certs/server.pem", ".aws/credentials")


def backdate(root: Path, mtime: float = OLD_MTIME) -> None:
    """Set the mtime (and atime) of ``root`` and everything below it, symlinks themselves."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            os.utime(os.path.join(dirpath, name), (mtime, mtime), follow_symlinks=False)
    os.utime(root, (mtime, mtime))


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def make_project(root: Path, *, secrets: bool = True) -> Path:
    """A sample project at ``root`` (created); returns ``root``."""
    write(root / "train.py", TRAIN_PY)
    write(root / "analysis.ipynb", json.dumps(NOTEBOOK, indent=1))
    write(root / "mypkg" / "__init__.py", '"""A package of the project."""\n')
    write(root / "mypkg" / "model.py", "def predict(x):\n    return 2 * x\n")
    write(root / "mypkg" / "__main__.py", "from .model import predict\n\nprint(predict(21))\n")
    write(root / "data" / "train.csv", "x,y\n" + "".join(f"{i},{2 * i}\n" for i in range(1000)))
    write(root / ".gitignore", "outputs/\n*.log\n")
    write(root / "outputs" / "result.txt", "an old result\n")
    write(root / "run.log", "an old log\n")
    write(root / ".git" / "HEAD", "ref: refs/heads/main\n")
    write(root / "mypkg" / "__pycache__" / "model.cpython-311.pyc", "not really bytecode")
    write(root / ".ipynb_checkpoints" / "analysis-checkpoint.ipynb", "{}")
    if secrets:
        write(root / ".env", "API_TOKEN=do-not-ship\n")
        write(root / ".env.local", "API_TOKEN=do-not-ship-either\n")
        write(root / "keys" / "id_rsa", "-----BEGIN OPENSSH PRIVATE KEY-----\n")
        write(root / "certs" / "server.pem", "-----BEGIN PRIVATE KEY-----\n")
        write(root / ".aws" / "credentials", "[default]\naws_secret_access_key = x\n")
    backdate(root)
    return root


def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python*/site-packages"))


def add_distribution(
    venv: Path,
    name: str,
    version: str = "1.0",
    *,
    files: dict[str, str] | None = None,
    editable_path: Path | None = None,
) -> Path:
    """Install a tiny pure distribution into ``venv`` as pip would lay it out; with
    ``editable_path``, an editable install pointing there (PEP 610 + ``__editable__`` .pth)."""
    site = site_packages(venv)
    dist_info = site / f"{name}-{version}.dist-info"
    written: list[str] = []
    if editable_path is None:
        for rel, text in (files or {f"{name}/__init__.py": f"VERSION = {version!r}\n"}).items():
            write(site / rel, text)
            written.append(rel)
    else:
        pth = f"__editable__.{name}-{version}.pth"
        write(site / pth, f"{editable_path}\n")
        written.append(pth)
        url = editable_path.absolute().as_uri()
        write(
            dist_info / "direct_url.json", json.dumps({"url": url, "dir_info": {"editable": True}})
        )
        written.append(f"{dist_info.name}/direct_url.json")
    meta = {
        "METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        "INSTALLER": "pip\n",
        "WHEEL": "Wheel-Version: 1.0\nGenerator: j2c-tests\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
        "top_level.txt": f"{name}\n",
    }
    for filename, text in meta.items():
        write(dist_info / filename, text)
        written.append(f"{dist_info.name}/{filename}")
    record = "".join(f"{rel},,\n" for rel in written) + f"{dist_info.name}/RECORD,,\n"
    write(dist_info / "RECORD", record)
    return dist_info


def make_venv(
    path: Path,
    *,
    packages: dict[str, str] | None = None,
    system_site_packages: bool = True,
) -> Path:
    """A real venv at ``path`` with small pure packages (default: ``tinypkg 1.0``, with a
    ``-m tinypkg`` entry and a console script), compiled bytecode, and old mtimes."""
    command = [sys.executable, "-m", "venv", "--without-pip"]
    if system_site_packages:
        command.append("--system-site-packages")
    subprocess.run([*command, str(path)], check=True)
    for name, version in (packages if packages is not None else {"tinypkg": "1.0"}).items():
        add_distribution(
            path,
            name,
            version,
            files={
                f"{name}/__init__.py": f"VERSION = {version!r}\n",
                f"{name}/__main__.py": f"print('{name}', {version!r})\n",
            },
        )
        script = path / "bin" / name
        write(script, f"#!{path / 'bin' / 'python'}\nimport {name}\nprint({name}.VERSION)\n")
        script.chmod(0o755)
    backdate(path)  # first, so that the bytecode records the sources' final mtimes
    compileall.compile_dir(str(site_packages(path)), quiet=1)
    backdate(path)
    return path


# A job's first lines that read every file under its working folder into ``seen`` (relative path
# -> sha256): what the job was sent, for tests to compare with what was packed.
SEEN_FILES_PY = """\
import hashlib, json, os
seen = {}
for folder, _, names in os.walk("."):
    for name in names:
        path = os.path.join(folder, name)[2:]
        with open(path, "rb") as handle:
            seen[path] = hashlib.sha256(handle.read()).hexdigest()
"""
