"""Checks of the settings against a request, made at preflight and submit before anything runs.

A ``file://`` store is a folder on the machine that packs, private to its user; a scheduler
whose jobs run on other machines cannot read it unless that folder is mounted at the same path
there, and a job running as another uid cannot read it at all: ``storage.shared: true``
declares the first and makes the store readable for the second. Each backend says why its jobs
cannot read such a store (:meth:`~j2c_server.schedulers.base.SchedulerBase.store_problem`: by
default, because it is ``remote``), so a new backend gets the check without a line here.
Without the check the job fails only where it runs, with ``j2c-unpack``'s "does not exist" or
"cannot be read" (exit 66). Preflight warns (the plan is still
worth seeing), submit refuses; both name ``storage.url``.
"""

from __future__ import annotations

from j2c_server.config import J2CSettings
from j2c_server.core.errors import ConfigError
from j2c_server.pack.models import PackPlan, PackWarning
from j2c_server.schedulers import scheduler_class

STORE_NOT_SHARED = "store_not_shared"
REFUSED_SETTING = "refused_setting"
EXPOSED = "exposed"


def store_problem(settings: J2CSettings, scheduler: str) -> str | None:
    """Why jobs of ``scheduler`` cannot read the store, or None when they can."""
    url = settings.storage_url()
    if not url.startswith("file://") or settings.storage.shared:
        return None
    return scheduler_class(scheduler).store_problem(settings, url)


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


async def warn_backend_at_preflight(
    plan: PackPlan, settings: J2CSettings, scheduler: str
) -> PackPlan:
    """``plan`` with a warning for each setting the backend's submit would refuse (a rootful
    container engine and ``user: 0:0``, ...), and for what the job would be exposed to there (a
    Ray cluster that others use too), so the user reads it before sending."""
    backend = scheduler_class(scheduler)
    problems = await backend.preflight_problems(settings)
    notes = await backend.preflight_notes(settings)
    if not problems and not notes:
        return plan
    warnings = [
        PackWarning(code=REFUSED_SETTING, message=f"{why} (submit refuses it)", path=field)
        for field, why in problems
    ] + [PackWarning(code=EXPOSED, message=what, path=field) for field, what in notes]
    return plan.model_copy(update={"warnings": [*plan.warnings, *warnings]})
