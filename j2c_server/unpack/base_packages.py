"""Shipped lab-base packages on the node: the ``base`` layers (format 4), on the venv's path.

Every base layer (one per lab site folder, image/base_layer.py) is extracted into
``<venv>/j2c-base/``, one after the other into the same folder, and
``<venv>/lib/pythonX.Y/site-packages/_j2c_base.pth`` names that folder by a path *relative* to
the site folder. So the shipped packages move with the venv, and nothing is rewritten for them:
at original paths, under the workdir (``--paths relocate``), and in the node cache, where they
are part of the venv's entry (its key holds the base layers' digests), used in place or linked
into the job's home like the rest of the venv.

Precedence: ``site`` adds a ``.pth`` file's folders right after the site folder that holds it,
and a ``--system-site-packages`` venv's own site folder comes before the base interpreter's. So
``sys.path`` is the venv's site-packages, then the shipped base packages, then the image's
site-packages: what the user installed into the venv still wins over anything shipped (as in
the lab), and what is shipped wins over the image's own copy of a name (which is why a shipped
version that breaks the image's own requirements is refused in the lab unless confirmed).
"""

from __future__ import annotations

import os
from pathlib import Path

from j2c_server.core.manifest_plan import LayerPlan, LayerRole, ManifestPlan
from j2c_server.unpack.errors import LocalIOError, ManifestInvalid
from j2c_server.unpack.log import say

FOLDER = "j2c-base"
PTH = "_j2c_base.pth"
FORMAT = 4  # the manifest format that may carry base layers


def check_base_layers(manifest: ManifestPlan) -> list[LayerPlan]:
    """The manifest's base layers, refused when it cannot carry them."""
    layers = manifest.base_layers()
    if not layers:
        return layers
    if manifest.format_version < FORMAT:
        raise ManifestInvalid(
            f"the manifest has base layers but format version {manifest.format_version} "
            f"(they need {FORMAT})",
            field="format_version",
        )
    if manifest.venv is None:
        raise ManifestInvalid(
            "the manifest ships lab-base packages but no venv to put them on", field="layers"
        )
    for layer in layers:
        if not os.path.isabs(layer.source_path) or ".." in Path(layer.source_path).parts:
            raise ManifestInvalid(
                f"the base layer's source_path {layer.source_path!r} is not an absolute path "
                "without '..'",
                field="layers.source_path",
            )
    return layers


def with_base_home(manifest: ManifestPlan, homes: dict[LayerRole, Path]) -> dict[LayerRole, Path]:
    """``homes`` plus where the base layers go (inside the venv), when the manifest has any."""
    venv = homes.get(LayerRole.venv)
    if venv is None or not check_base_layers(manifest):
        return homes
    return {**homes, LayerRole.base: venv / FOLDER}


def _site_packages(venv: Path) -> Path:
    found = sorted((venv / "lib").glob("python*/site-packages"))
    if not found:
        raise LocalIOError(f"the venv at {venv} has no lib/pythonX.Y/site-packages")
    return found[0]


def place_base(venv: Path, blobs: list[tuple[LayerPlan, Path]]) -> int:
    """Extract the base layers (verified blobs) into ``<venv>/j2c-base`` and put that folder on
    the venv's path; the bytes written."""
    from j2c_server.unpack.extract import extract_layer

    target = venv / FOLDER
    total = entries = 0
    for index, (layer, blob) in enumerate(blobs):
        result = extract_layer(blob, target, max_bytes=layer.unpacked_size, into=index > 0)
        total += result.bytes
        entries += result.entries
    site = _site_packages(venv)
    try:
        (site / PTH).write_text(os.path.relpath(target, site) + "\n")
    except OSError as exc:
        raise LocalIOError(f"cannot write {site / PTH}: {exc.strerror or exc}") from None
    parts = f" ({len(blobs)} layers)" if len(blobs) > 1 else ""
    say("extracting", f"base layer{parts}: {entries} entries into {target}, after the venv's own")
    return total
