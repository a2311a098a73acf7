"""Checks of the settings against a request, made at preflight and submit before anything runs.

Today one: a ``file://`` store is a folder on the machine that packs; a scheduler that runs jobs
on other machines (Slurm, Kubernetes) cannot read it unless that folder is mounted at the same
path there, which ``storage.shared: true`` declares. Without the check the job fails only on
the node, with ``j2c-unpack``'s "does not exist" (exit 66). Preflight warns (the plan is still
worth seeing), submit refuses; both name ``storage.url``.
"""

from __future__ import annotations

from .config import J2CSettings
from .errors import ConfigError
from .pack.models import PackPlan, PackWarning

# Schedulers whose jobs run on machines other than the server's.
REMOTE_SCHEDULERS = frozenset({"slurm", "kubernetes"})
STORE_NOT_SHARED = "store_not_shared"


def store_problem(settings: J2CSettings, scheduler: str) -> str | None:
    """Why jobs of ``scheduler`` cannot read the store, or None when they can."""
    url = settings.storage_url()
    if not url.startswith("file://") or settings.storage.shared:
        return None
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
