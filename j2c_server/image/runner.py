"""What the entry point's runner needs of the job's Python, checked before anything is uploaded.

A notebook runs under j2c-unpack's notebook runner (unpack/notebook.py), which imports nbclient
and starts an ipykernel kernel with the venv's interpreter: both must be importable there, from
the venv or from the Python under it (the image's, or the lab's own for a job on this machine).
A job without them fails once it has been packed, uploaded and queued (exit 71). This module
says so at the check before upload instead, naming them:

- the runner's modules count as the project's imports (:func:`runner_needs`, given to the image
  check: image/job_needs.lab_side): what the lab's base has and the target lacks is listed
  among the image's gaps, and shipped with the lab's base where that is on;
- :func:`runner_warning`: what neither the venv, nor the target's Python, nor the shipped base
  holds, as a warning of the send's plan (``notebook_runner``), with what to install. For a
  target not known yet it names what the venv lacks (the job's own check, unpack/needs.py,
  says the rest when it starts).

A venv that reaches them another way (a ``.pth`` file into another environment) is not seen
here: it is a warning, never a refusal.
"""

from __future__ import annotations

import re
from pathlib import Path

from j2c_server.image.needs import lab_dists
from j2c_server.pack.models import PackWarning
from j2c_server.pack.venv import open_venv
from j2c_server.unpack.inventory import site_dirs
from j2c_server.wire.image import ImageInventory, ImageReport

# unpack/notebook.py's RUNNER_NEEDS (it imports nothing of j2c: a test checks they agree); the
# module and the distribution have the same name.
NOTEBOOK_RUNNER_NEEDS = ("nbclient", "ipykernel")
RUNNER = "the notebook runner"
CODE = "notebook_runner"
INSTALL = "pip install nbclient ipykernel"


def runner_needs(call_path: str) -> tuple[str, ...]:
    """The modules the entry point's runner imports: a notebook's; nothing for a script."""
    entry = call_path.strip()
    return NOTEBOOK_RUNNER_NEEDS if entry.endswith(".ipynb") and not entry.startswith("-m ") else ()


def runner_warning(
    needs: tuple[str, ...],
    venv_path: Path | None,
    report: ImageReport | None,
    inventory: ImageInventory | None,
) -> PackWarning | None:
    """The plan's warning when the runner's ``needs`` are found nowhere the job looks.
    ``report``: the image check's (None: the job runs on the lab's own Python);
    ``inventory``: the target's, when known. Synchronous: metadata is read."""
    if not needs:
        return None
    venv = open_venv(venv_path) if venv_path is not None else None
    venv_has = set(lab_dists([venv.site_packages])) if venv and venv.site_packages else set()
    sees_base = venv is None or venv.info.include_system_site_packages
    lacking = [name for name in needs if _key(name) not in venv_has]
    if not lacking:
        return None
    if report is None:  # this machine's Python, under the venv
        base: list[Path] = []
        if sees_base:
            base = [Path(p) for p in venv.base.paths] if venv and venv.base else []
            base = base if venv is not None else [Path(p) for p in site_dirs()]
        lab = set(lab_dists(base))
        lacking = [name for name in lacking if _key(name) not in lab]
        where = "the venv and this machine's Python under it lack"
    elif inventory is not None and report.known:
        image = {_key(dist.name) for dist in inventory.distributions} if sees_base else set()
        shipped = _shipped(report)
        lacking = [n for n in lacking if _key(n) not in image and _key(n) not in shipped]
        where = f"neither the venv nor {report.target} has"
    else:
        shipped = _shipped(report)
        lacking = [name for name in lacking if _key(name) not in shipped]
        where = f"the venv lacks ({report.target} is not known yet: it runs only if that has)"
    if not lacking:
        return None
    return PackWarning(
        code=CODE,
        message=f"{RUNNER} needs nbclient and ipykernel to run a notebook; {where} "
        f"{' and '.join(lacking)}: install them into the venv ({INSTALL}) or the image",
        path="venv_path",
    )


def _shipped(report: ImageReport) -> set[str]:
    """The lab-base distributions that ship with the job (``name version`` each)."""
    if report.shipping is None or not report.shipping.enabled:
        return set()
    return {_key(label.split()[0]) for label in report.shipping.names}


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()
