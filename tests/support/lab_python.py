"""The lab's own Python (this machine's base interpreter, not the test venv's) for tests that
send a project whose venv leans on it to an image that is not the lab, and the container
settings and request those tests send it with."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from j2c_server.config import J2CSettings, load_settings
from j2c_server.wire.api import JobRequest
from tests.support.jobs import settle
from tests.support.podman import Podman

LAB_PYTHON = Path(getattr(sys, "_base_executable", sys.executable))


def lab_has(*modules: str) -> bool:
    """Whether the lab's base Python imports every one of ``modules``."""
    code = "import " + ", ".join(modules)
    return subprocess.run([str(LAB_PYTHON), "-I", "-c", code], capture_output=True).returncode == 0


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
