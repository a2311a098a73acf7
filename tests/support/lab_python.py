"""The lab's own Python (this machine's base interpreter, not the test venv's) for tests that
send a project whose venv leans on it to an image that is not the lab, and the container
settings and request those tests send it with.

Those tests need packages in that Python's own base that the platform image lacks (regex,
scipy) or has in another version (numpy 2 against the image's 1.24, which this scipy does not
accept): ``scripts/setup.sh`` installs :data:`LAB_PACKAGES` there when they are missing, and
:func:`need_lab_packages` skips a test without them (fails it under CI)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from j2c_server.config import J2CSettings, load_settings
from j2c_server.wire.api import JobRequest
from tests.support.ci import engine_missing
from tests.support.jobs import settle
from tests.support.podman import Podman

LAB_PYTHON = Path(getattr(sys, "_base_executable", sys.executable))
# What scripts/setup.sh installs into LAB_PYTHON (keep the two in step).
LAB_PACKAGES = ("regex", "scipy>=1.16", "numpy>=2")


def need_lab_packages() -> None:
    """Skip (under CI: fail) unless the lab's Python has :data:`LAB_PACKAGES`' numpy 2."""
    code = "import regex, scipy, numpy; assert int(numpy.__version__.split('.')[0]) >= 2"
    done = subprocess.run([str(LAB_PYTHON), "-I", "-c", code], capture_output=True, text=True)
    if done.returncode != 0:
        engine_missing(
            f"the lab's Python ({LAB_PYTHON}) lacks {', '.join(LAB_PACKAGES)} "
            "(scripts/setup.sh installs them): " + (done.stderr.strip().splitlines() or ["?"])[-1]
        )


def lab_venv(root: Path) -> Path:
    """A ``--system-site-packages`` venv of the lab's Python at ``root/.venv``."""
    venv = root / ".venv"
    subprocess.run([str(LAB_PYTHON), "-m", "venv", "--system-site-packages", str(venv)], check=True)
    return venv


def lab_project(root: Path, files: dict[str, str]) -> Path:
    """A project at ``root`` holding ``files`` (name: text), its venv made with the lab's Python
    and settled (old enough for the packer's change check)."""
    root.mkdir()
    for name, text in files.items():
        (root / name).write_text(text)
    lab_venv(root)
    settle(root)
    return root


def image_settings(
    podman: Podman, data: Path, *, probe: bool = True, ship_base: bool = True
) -> J2CSettings:
    """Jobs in podman's platform image, the store under ``data``; ``probe``: whether the image
    is probed before a send; ``ship_base``: whether lab-base packages the image lacks ship."""
    container: dict[str, object] = {"socket": podman.socket}
    if not probe:
        container["probe_images"] = False
    overrides: dict[str, object] = {
        "data_dir": str(data),
        "default_image": podman.image,
        "storage": {"url": (data / "store").as_uri(), "shared": True},
        "scheduler": {"default": "container", "container": container},
    }
    if not ship_base:
        overrides["pack"] = {"ship_base_packages": False}
    return load_settings(environ={}, overrides=overrides)


def image_request(project: Path, entry: str) -> JobRequest:
    """Send ``project`` (its venv at ``.venv``) to run ``entry`` in a container."""
    return JobRequest(
        code_path=str(project),
        call_path=entry,
        venv_path=str(project / ".venv"),
        scheduler="container",
    )
