"""The REST routes: thin adapters between HTTP and the job service, and :data:`ROUTES`, the one
table of every route (REST and the websocket of :mod:`.stream_handler`).

Every route requires Jupyter's authentication and then its authorization: each HTTP method is
declared with :func:`~.handler_base.requires`, which names the action checked by the server's
``Authorizer``; :func:`routes` refuses a handler method that declares no action, so a new route
cannot ship without one. Errors, caps and redaction are :mod:`.handler_base`'s.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote, urlencode

from jupyter_server.utils import url_path_join
from tornado import web
from tornado.iostream import StreamClosedError

from j2c_server.core.errors import InvalidInput
from j2c_server.jobs.send.proposal import defaults_for_browser
from j2c_server.registry import paging as registry_paging
from j2c_server.schedulers import capabilities, known_backends, skipped_backends
from j2c_server.server.handler_base import (
    DEFAULT_EVENTS_LIMIT,
    EXECUTE,
    MAX_EVENTS_LIMIT,
    MAX_SEQ,
    READ,
    WRITE,
    J2CHandler,
    declared_actions,
    requires,
)
from j2c_server.server.stream_handler import EventStreamHandler
from j2c_server.sweeps.view import sweep_view
from j2c_server.wire.api import ArtifactCopy, ImageChoice, JobRequest, ServerConfig


class ConfigHandler(J2CHandler):
    @requires(READ)
    async def get(self) -> None:
        settings = self.j2c_settings
        default_image = settings.lab_image()
        images = list(settings.images)
        if default_image and all(i.image != default_image for i in images):
            images.insert(0, ImageChoice(name="This lab's image", image=default_image))
        self.write_model(
            ServerConfig(
                version=self.settings["j2c_version"],
                storage_kind=settings.storage_url().split("://", 1)[0],
                scheduler_kinds=available_schedulers(),
                capabilities={name: capabilities(name) for name in available_schedulers()},
                skipped_schedulers=skipped_backends(),
                default_scheduler=settings.scheduler.default,
                default_image=default_image,
                images=images,
                compression_level=settings.pack.compression_level,
                max_attempts=settings.resume.max_attempts,
            )
        )


class DefaultsHandler(J2CHandler):
    """What the Send form proposes for a file: one rule with ``%j2c``."""

    @requires(READ)
    async def get(self) -> None:
        path = self.get_argument("path", None)
        if path is None:
            raise InvalidInput(
                "path: required (the file to send, relative to the root)", field="path"
            )
        kernel = self.get_argument("kernel_prefix", None)
        root = self.service.root_dir or self.settings.get("server_root_dir") or "."
        self.write_model(await asyncio.to_thread(defaults_for_browser, root, path, kernel))


class PreflightHandler(J2CHandler):
    # Reads the project folder and reports the plan; nothing is created or run.
    @requires(READ)
    async def post(self) -> None:
        self.write_model(await self.service.preflight(self.parse_body(JobRequest)))


class JobsHandler(J2CHandler):
    """``GET /jobs?limit=N&before=CURSOR``: one page, newest first (``registry_paging``); a
    full page carries ``Link: <...>; rel="next"``."""

    @requires(READ)
    async def get(self) -> None:
        limit = self.int_argument(
            "limit",
            registry_paging.DEFAULT_JOBS_LIMIT,
            minimum=1,
            maximum=registry_paging.MAX_JOBS_LIMIT,
        )
        before = registry_paging.parse_cursor(self.get_argument("before", None))
        page = await self.service.jobs_page(limit, before)
        if page.next is not None:
            query = urlencode({"limit": limit, "before": str(page.next)})
            self.set_header("Link", f'<{self.request.path}?{query}>; rel="next"')
        self.set_header("Content-Type", "application/json")
        self.finish("[" + ",".join(page.records) + "]")

    # Submitting runs the user's code on the scheduler.
    @requires(EXECUTE)
    async def post(self) -> None:
        record = await self.service.submit(self.parse_body(JobRequest), self.actor)
        self.set_header("Location", url_path_join(self.request.path, record.id))
        self.write_model(record, status=202)


class JobHandler(J2CHandler):
    @requires(READ)
    async def get(self, job_id: str) -> None:
        self.write_model(await self.service.get(job_id))

    @requires(WRITE)
    async def delete(self, job_id: str) -> None:
        await self.service.remove(job_id, self.actor)
        self.set_status(204)
        self.finish()


class CancelHandler(J2CHandler):
    @requires(WRITE)
    async def post(self, job_id: str) -> None:
        self.write_model(await self.service.cancel(job_id, self.actor))


class SweepHandler(J2CHandler):
    """``GET /jobs/{id}/sweep``: a sweep's variants with their params, jobs and metrics, as the
    Compute panel's sweep view shows them (``SweepView``)."""

    @requires(READ)
    async def get(self, job_id: str) -> None:
        self.write_model(await sweep_view(self.service, job_id))


class EventsHandler(J2CHandler):
    """``GET /jobs/{id}/events?after=N&limit=M``: at most ``limit`` events (default
    :data:`DEFAULT_EVENTS_LIMIT`) after seq N; a client pages on with the last seq it got."""

    @requires(READ)
    async def get(self, job_id: str) -> None:
        after = self.int_argument("after", 0, maximum=MAX_SEQ)
        limit = self.int_argument(
            "limit", DEFAULT_EVENTS_LIMIT, minimum=1, maximum=MAX_EVENTS_LIMIT
        )
        self.write_model(await self.service.events(job_id, after, limit))


class ArtifactHandler(J2CHandler):
    """``GET /jobs/{id}/artifacts/{name}``: one recorded artifact of a finished job, as a
    download, streamed chunk by chunk (each flushed before the next is read)."""

    @requires(READ)
    async def get(self, job_id: str, name: str) -> None:
        await self.download(job_id, name)

    async def download(self, job_id: str, name: str) -> None:
        async with self.service.open_artifact(job_id, name) as artifact:
            self.set_header("Content-Type", artifact.media_type)
            self.set_header("Content-Disposition", attachment(artifact.filename))
            self.set_header("Content-Length", str(artifact.size))
            try:
                async for chunk in artifact.chunks():
                    self.write(chunk)
                    await self.flush()
            except StreamClosedError:
                return  # the browser hung up; nothing to answer
        # APIHandler.finish would otherwise set its JSON type.
        self.finish(set_content_type=artifact.media_type)


class CopyArtifactHandler(ArtifactHandler):
    """``POST /jobs/{id}/artifacts/{name}/copy``: the artifact copied into the job's project
    folder, answering where (GET still downloads an artifact whose name ends in ``/copy``)."""

    @requires(READ)
    async def get(self, job_id: str, name: str) -> None:
        await self.download(job_id, f"{name}/copy")

    # Writes a file into the user's project folder.
    @requires(WRITE)
    async def post(self, job_id: str, name: str) -> None:
        path = await self.service.copy_artifact(job_id, name, self.actor)
        self.write_model(ArtifactCopy(path=path))


class CopyAllArtifactsHandler(J2CHandler):
    """``POST /jobs/{id}/copy-artifacts``: every artifact copied into the job's project folder
    ("Copy all"), answering the folder, the copies and each file not copied with why."""

    # Writes files into the user's project folder.
    @requires(WRITE)
    async def post(self, job_id: str) -> None:
        self.write_model(await self.service.copy_all_artifacts(job_id, self.actor))


def attachment(filename: str) -> str:
    """A ``Content-Disposition`` naming the file: an ASCII fallback, the exact name in UTF-8."""
    fallback = "".join(
        c if c.isascii() and c.isprintable() and c not in '"\\' else "_" for c in filename
    )
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(filename, safe='')}"


def available_schedulers() -> list[str]:
    return sorted(known_backends())


_JOB_ID = r"(?P<job_id>[A-Za-z0-9][A-Za-z0-9._-]{0,127})"
_ARTIFACT = r"(?P<name>.+)"


@dataclass(frozen=True)
class Route:
    """One route under ``/j2c/api``: its path parts and handler (each of whose methods
    declares its action with :func:`requires`)."""

    path: tuple[str, ...]
    handler: type[web.RequestHandler]


ROUTES: Final[tuple[Route, ...]] = (
    Route(("config",), ConfigHandler),
    Route(("defaults",), DefaultsHandler),
    Route(("preflight",), PreflightHandler),
    Route(("jobs",), JobsHandler),
    Route(("jobs", _JOB_ID), JobHandler),
    Route(("jobs", _JOB_ID, "cancel"), CancelHandler),
    Route(("jobs", _JOB_ID, "events"), EventsHandler),
    Route(("jobs", _JOB_ID, "sweep"), SweepHandler),
    Route(("jobs", _JOB_ID, "stream"), EventStreamHandler),
    Route(("jobs", _JOB_ID, "copy-artifacts"), CopyAllArtifactsHandler),
    # Before the download route: a path ending in /copy is the copy (POST).
    Route(("jobs", _JOB_ID, "artifacts", _ARTIFACT, "copy"), CopyArtifactHandler),
    Route(("jobs", _JOB_ID, "artifacts", _ARTIFACT), ArtifactHandler),
)


def routes(base_url: str = "/") -> list[tuple[str, type[Any]]]:
    """Every route of the extension; the auth test enumerates exactly this list. Refuses a
    handler method without a declared action: a route without authorization never loads."""
    api = url_path_join(base_url, "j2c", "api")
    for route in ROUTES:
        missing = [m for m, action in declared_actions(route.handler).items() if action is None]
        if missing:
            raise TypeError(
                f"{route.handler.__name__}: {', '.join(missing)} declares no action; "
                "decorate it with @requires(READ | WRITE | EXECUTE)"
            )
    return [(url_path_join(api, *route.path), route.handler) for route in ROUTES]
