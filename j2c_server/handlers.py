"""REST and websocket routes: thin adapters between HTTP and the job service.

Errors are mapped once, in :meth:`J2CErrors.write_error` (REST and websocket alike): a
:class:`J2CError` becomes its own status (4xx for bad input) with ``{"error", "message",
"field"}``; a pydantic validation error becomes 400 naming the field. No handler carries its own
try/except. Every route requires Jupyter's authentication.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, TypeVar
from urllib.parse import quote

from jupyter_server.auth.decorator import ws_authenticated
from jupyter_server.base.handlers import APIHandler, JupyterHandler
from jupyter_server.base.websocket import WebSocketMixin
from jupyter_server.utils import url_path_join
from pydantic import BaseModel, ValidationError
from tornado import web
from tornado.iostream import StreamClosedError
from tornado.websocket import WebSocketClosedError, WebSocketHandler

from .config import J2CSettings
from .defaults import defaults_for_browser
from .errors import InvalidInput, J2CError
from .models import ArtifactCopy, ImageChoice, JobRequest, ServerConfig
from .service import JobService

ModelT = TypeVar("ModelT", bound=BaseModel)


def validation_error_to_j2c(exc: ValidationError) -> InvalidInput:
    first = exc.errors()[0]
    field = ".".join(str(p) for p in first["loc"]) or None
    message = f"{field}: {first['msg']}" if field else str(first["msg"])
    return InvalidInput(message, field=field)


class J2CErrors(JupyterHandler):
    """The one error mapping, shared by the REST handlers and the websocket."""

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, ValidationError):
            exc = validation_error_to_j2c(exc)
        if isinstance(exc, J2CError):
            self.set_status(exc.status_code)
            self.set_header("Content-Type", "application/json")
            self.finish(json.dumps(exc.to_dict()))
            return
        super().write_error(status_code, **kwargs)

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        # A user's bad input is not a server error: one line, no traceback.
        if isinstance(value, (J2CError, ValidationError)):
            self.log.info("j2c: %s %s: %s", self.request.method, self.request.uri, value)
            return
        super().log_exception(typ, value, tb)

    @property
    def service(self) -> JobService:
        service: JobService = self.settings["j2c_service"]
        return service

    def int_argument(self, name: str, default: int) -> int:
        raw = self.get_argument(name, None)
        if raw is None:
            return default
        if not raw.isdigit():
            raise InvalidInput(f"{name}: must be a non-negative integer, not {raw!r}", field=name)
        return int(raw)


class J2CHandler(J2CErrors, APIHandler):
    """Base for every j2c REST route: JSON in and out."""

    @property
    def j2c_settings(self) -> J2CSettings:
        settings: J2CSettings = self.settings["j2c_settings"]
        return settings

    def parse_body(self, model: type[ModelT]) -> ModelT:
        try:
            raw = json.loads(self.request.body or b"{}")
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"request body is not valid JSON: {exc.msg}") from None
        if not isinstance(raw, dict):
            raise InvalidInput("request body must be a JSON object")
        try:
            return model.model_validate(raw)
        except ValidationError as exc:
            raise validation_error_to_j2c(exc) from None

    def write_model(self, model: BaseModel | list[Any], status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        if isinstance(model, BaseModel):
            self.finish(model.model_dump_json())
        else:
            items = (
                m.model_dump_json() if isinstance(m, BaseModel) else json.dumps(m) for m in model
            )
            self.finish("[" + ",".join(items) + "]")


class ConfigHandler(J2CHandler):
    @web.authenticated
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
                default_scheduler=settings.scheduler.default,
                default_image=default_image,
                images=images,
                compression_level=settings.pack.compression_level,
            )
        )


class DefaultsHandler(J2CHandler):
    """What the Send form proposes for a file: one rule with ``%j2c`` (a read action)."""

    @web.authenticated
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
    @web.authenticated
    async def post(self) -> None:
        self.write_model(await self.service.preflight(self.parse_body(JobRequest)))


class JobsHandler(J2CHandler):
    @web.authenticated
    async def get(self) -> None:
        self.write_model(await self.service.list())

    @web.authenticated
    async def post(self) -> None:
        record = await self.service.submit(self.parse_body(JobRequest))
        self.set_header("Location", url_path_join(self.request.path, record.id))
        self.write_model(record, status=202)


class JobHandler(J2CHandler):
    @web.authenticated
    async def get(self, job_id: str) -> None:
        self.write_model(await self.service.get(job_id))

    @web.authenticated
    async def delete(self, job_id: str) -> None:
        await self.service.remove(job_id)
        self.set_status(204)
        self.finish()


class CancelHandler(J2CHandler):
    @web.authenticated
    async def post(self, job_id: str) -> None:
        self.write_model(await self.service.cancel(job_id))


class EventsHandler(J2CHandler):
    @web.authenticated
    async def get(self, job_id: str) -> None:
        after = self.int_argument("after", 0)
        limit = self.int_argument("limit", 0) or None
        self.write_model(await self.service.events(job_id, after, limit))


class ArtifactHandler(J2CHandler):
    """``GET /jobs/{id}/artifacts/{name}``: one recorded artifact of a finished job, as a
    download, streamed chunk by chunk (each flushed before the next is read)."""

    @web.authenticated
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

    @web.authenticated
    async def get(self, job_id: str, name: str) -> None:
        await self.download(job_id, f"{name}/copy")

    @web.authenticated
    async def post(self, job_id: str, name: str) -> None:
        self.write_model(ArtifactCopy(path=await self.service.copy_artifact(job_id, name)))


def attachment(filename: str) -> str:
    """A ``Content-Disposition`` naming the file: an ASCII fallback, the exact name in UTF-8."""
    fallback = "".join(
        c if c.isascii() and c.isprintable() and c not in '"\\' else "_" for c in filename
    )
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(filename, safe='')}"


class EventStreamHandler(WebSocketMixin, WebSocketHandler, J2CErrors):
    """``/jobs/{id}/stream?after=N``: replays the events after N, then sends live ones, one
    JSON text message each, and closes after the terminal status event. The job goes on when
    the socket closes; a client that reconnects with its last seq misses nothing."""

    _pump: asyncio.Task[None] | None = None

    def set_default_headers(self) -> None:
        """No page headers on a websocket (as jupyter_server's kernel websocket)."""

    @ws_authenticated
    async def get(self, job_id: str) -> None:
        self._after = self.int_argument("after", 0)
        await self.service.get(job_id)  # an unknown job is a 404 before the upgrade
        await super().get(job_id)

    def open(self, job_id: str) -> None:
        super().open()
        self._pump = asyncio.create_task(self._send_events(job_id))

    async def _send_events(self, job_id: str) -> None:
        try:
            async for event in self.service.stream(job_id, self._after):
                await self.write_message(event.model_dump_json(exclude_defaults=True))
        except WebSocketClosedError:
            return
        except J2CError as exc:  # e.g. the server is stopping: 4503
            # A close frame's reason holds at most 123 bytes.
            self.close(4000 + exc.status_code, exc.message.encode()[:120].decode(errors="ignore"))
            return
        self.close(1000, "job finished")

    def on_message(self, message: str | bytes) -> None:
        """Clients only listen."""

    def on_close(self) -> None:
        if self._pump is not None:
            self._pump.cancel()


def available_schedulers() -> list[str]:
    from .schedulers import BACKENDS

    return sorted(BACKENDS)


_JOB_ID = r"(?P<job_id>[A-Za-z0-9][A-Za-z0-9._-]{0,127})"
_ARTIFACT = r"(?P<name>.+)"


def routes(base_url: str = "/") -> list[tuple[str, type[Any]]]:
    """Every route of the extension; the auth test enumerates exactly this list."""
    api = url_path_join(base_url, "j2c", "api")
    return [
        (url_path_join(api, "config"), ConfigHandler),
        (url_path_join(api, "defaults"), DefaultsHandler),
        (url_path_join(api, "preflight"), PreflightHandler),
        (url_path_join(api, "jobs"), JobsHandler),
        (url_path_join(api, "jobs", _JOB_ID), JobHandler),
        (url_path_join(api, "jobs", _JOB_ID, "cancel"), CancelHandler),
        (url_path_join(api, "jobs", _JOB_ID, "events"), EventsHandler),
        (url_path_join(api, "jobs", _JOB_ID, "stream"), EventStreamHandler),
        # Before the download route: a path ending in /copy is the copy (POST).
        (url_path_join(api, "jobs", _JOB_ID, "artifacts", _ARTIFACT, "copy"), CopyArtifactHandler),
        (url_path_join(api, "jobs", _JOB_ID, "artifacts", _ARTIFACT), ArtifactHandler),
    ]
