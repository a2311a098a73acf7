"""Which inventory a job's target has: its key in the image store, and how to say it.

Keys (decided here, written in docs/images.md):

- ``container-id:<engine image id>``: ``scheduler: container``; the reference is resolved by the
  engine (a tag moved to a new build is a new image), see ``probe.py``;
- ``image:<reference>``: every other backend that runs the job in an image (Kubernetes, Slurm
  with pyxis): the reference as given, digest included when it has one;
- ``slurm:<url>#<partition>``: Slurm with ``container_runtime: none`` (the nodes' own Python);
  ``<scheduler>:<image or ->`` for other backends without an image;
- none for ``local``: the job runs on the lab's own machine and Python, which the packer's own
  checks already compare with.
"""

from __future__ import annotations

from dataclasses import dataclass

from j2c_server.config import J2CSettings
from j2c_server.schedulers.slurm.settings import SlurmSettings

CONTAINER = "container"


@dataclass(frozen=True)
class Target:
    scheduler: str
    key: str  # where its inventory is kept (for the container backend: before resolving)
    label: str  # "image localhost/x:1", "slurm partition gpu"
    image: str | None = None


def target_for(settings: J2CSettings, scheduler: str, image: str | None) -> Target | None:
    """The target of a job sent to ``scheduler`` with ``image``; None when the job runs on the
    lab's own Python (``local``)."""
    if scheduler == "local":
        return None
    if scheduler == CONTAINER:
        return Target(scheduler, f"image:{image or '-'}", f"image {image or '(none)'}", image)
    if scheduler == "slurm":
        slurm = settings.scheduler.section("slurm", SlurmSettings)
        if slurm.container_runtime == "none":
            partition = slurm.partition or "default"
            return Target(
                scheduler,
                f"slurm:{slurm.url or '-'}#{partition}",
                f"slurm partition {partition}",
            )
    if image:
        return Target(scheduler, f"image:{image}", f"image {image}", image)
    return Target(scheduler, f"{scheduler}:-", f"{scheduler} nodes")


def container_key(image_id: str) -> str:
    """The key of an engine's image ID (engines differ on the ``sha256:`` prefix)."""
    return f"container-id:{image_id.removeprefix('sha256:')}"
