"""Checks of the settings against a request, made at preflight and submit before anything runs.

A ``file://`` store is a folder on the machine that packs, private to its user; a scheduler
that runs jobs on other machines (Slurm, Kubernetes) cannot read it unless that folder is
mounted at the same path there, and a container running as another uid cannot read it at all:
``storage.shared: true`` declares the first and makes the store readable for the second.
Without the check the job fails only where it runs, with ``j2c-unpack``'s "does not exist" or
"cannot be read" (exit 66). Preflight warns (the plan is still
worth seeing), submit refuses; both name ``storage.url``.
"""

from __future__ import annotations

import os

from ..config import J2CSettings
from ..errors import ConfigError
from ..pack.models import PackPlan, PackWarning
from ..schedulers.container_settings import ContainerSettings

# Schedulers whose jobs run on machines other than the server's.
REMOTE_SCHEDULERS = frozenset({"slurm", "kubernetes"})
STORE_NOT_SHARED = "store_not_shared"


def store_problem(settings: J2CSettings, scheduler: str) -> str | None:
    """Why jobs of ``scheduler`` cannot read the store, or None when they can."""
    url = settings.storage_url()
    if not url.startswith("file://") or settings.storage.shared:
        return None
    if scheduler == "container":
        user = settings.scheduler.section("container", ContainerSettings).job_user()
        uid = int(user.split(":")[0])
        if uid == os.getuid():
            return None
        return (
            f"storage.url: {url} is private to this user (uid {os.getuid()}), but container "
            f"jobs run as uid {uid} and cannot read it; set storage.shared: true (its objects "
            "become readable by other users), or scheduler.container.user to your own uid"
        )
    if scheduler not in REMOTE_SCHEDULERS:
        return None
    return (
        f"storage.url: {url} is a folder on this machine, but {scheduler} jobs run on other "
        "machines and cannot read it; set storage.url to an object store (s3://...), or "
        "storage.shared: true if that folder is mounted at the same path on the compute nodes"
    )


def check_store_for_submit(settings: J2CSettings, scheduler: str) -> None:
    """Refuse a submit whose job could not fetch its layers (ConfigError naming storage.url)."""
    problem = store_problem(settings, scheduler)
    if problem is not None:
        raise ConfigError(problem, field="storage.url")


def warn_store_at_preflight(plan: PackPlan, settings: J2CSettings, scheduler: str) -> PackPlan:
    """``plan`` with a warning added when the store cannot be read where the job runs."""
    problem = store_problem(settings, scheduler)
    if problem is None:
        return plan
    warning = PackWarning(code=STORE_NOT_SHARED, message=problem, path="storage.url")
    return plan.model_copy(update={"warnings": [*plan.warnings, warning]})
