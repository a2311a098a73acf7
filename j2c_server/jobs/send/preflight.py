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

import asyncio

from j2c_server.config import J2CSettings
from j2c_server.core.errors import ConfigError
from j2c_server.core.units import count
from j2c_server.pack.models import PackPlan, PackWarning
from j2c_server.schedulers import scheduler_class
from j2c_server.storage.file import private_objects
from j2c_server.storage.urls import file_url_path, url_scheme

STORE_NOT_SHARED = "store_not_shared"
STORE_MADE_SHARED = "store_made_shared"
REFUSED_SETTING = "refused_setting"
EXPOSED = "exposed"


def store_problem(settings: J2CSettings, scheduler: str) -> str | None:
    """Why jobs of ``scheduler`` cannot read the store, or None when they can."""
    url = settings.storage_url()
    if not url.startswith("file://") or settings.storage.shared:
        return None
    return scheduler_class(scheduler).store_problem(settings, url)


async def check_before_scan(settings: J2CSettings, scheduler: str, image: str | None) -> None:
    """Refuse, before anything is scanned, a submit whose job could not run: a store its jobs
    cannot read (ConfigError naming storage.url), a setting the backend would refuse, an image
    it cannot start (none given, one its engine lacks). Each costs the user a whole scan, pack
    and upload when said at submit."""
    problem = store_problem(settings, scheduler)
    if problem is not None:
        raise ConfigError(problem, field="storage.url")
    backend = scheduler_class(scheduler)
    refused = await backend.preflight_problems(settings)
    if refused:
        field, why = refused[0]
        raise ConfigError(why, field=field)
    image_error = await backend.image_problem(settings, image)
    if image_error is not None:
        raise image_error


def with_warning(plan: PackPlan, warning: PackWarning | None) -> PackPlan:
    """``plan`` with ``warning`` added (unchanged without one)."""
    if warning is None:
        return plan
    return plan.model_copy(update={"warnings": [*plan.warnings, warning]})


async def warn_store_at_preflight(
    plan: PackPlan, settings: J2CSettings, scheduler: str
) -> PackPlan:
    """``plan`` with a warning added when the store cannot be read where the job runs, and a
    note when a store now shared still holds objects written while it was private (the sends
    that reuse them publish readable copies: nothing to do, but said)."""
    problem = store_problem(settings, scheduler)
    if problem is not None:
        warning = PackWarning(code=STORE_NOT_SHARED, message=problem, path="storage.url")
        return plan.model_copy(update={"warnings": [*plan.warnings, warning]})
    url = settings.storage_url()
    if not settings.storage.shared or url_scheme(url) != "file":
        return plan
    root = file_url_path(url, field="storage.url")
    private = await asyncio.to_thread(private_objects, root)
    if not private:
        return plan
    note = PackWarning(
        code=STORE_MADE_SHARED,
        message=f"{count(private, 'object')} of the store {root} were written while it was "
        "private (readable by you alone); the sends that reuse them write readable copies, "
        "so jobs of other uids can read them",
        path="storage.shared",
    )
    return plan.model_copy(update={"warnings": [*plan.warnings, note]})


async def warn_backend_at_preflight(
    plan: PackPlan, settings: J2CSettings, scheduler: str, image: str | None
) -> PackPlan:
    """``plan`` with a warning for each setting the backend's submit would refuse (a rootful
    container engine and ``user: 0:0``, ...), for an image it cannot start, and for what the
    job would be exposed to there (a Ray cluster that others use too), so the user reads it
    before sending."""
    backend = scheduler_class(scheduler)
    problems = await backend.preflight_problems(settings)
    image_error = await backend.image_problem(settings, image)
    if image_error is not None:
        problems = [*problems, (image_error.field or "image", image_error.message)]
    notes = await backend.preflight_notes(settings)
    if not problems and not notes:
        return plan
    warnings = [
        PackWarning(code=REFUSED_SETTING, message=f"{why} (submit refuses it)", path=field)
        for field, why in problems
    ] + [PackWarning(code=EXPOSED, message=what, path=field) for field, what in notes]
    return plan.model_copy(update={"warnings": [*plan.warnings, *warnings]})
