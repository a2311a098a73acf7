"""REST and websocket routes: thin adapters between HTTP and the job service.

Errors are mapped once, in :meth:`J2CErrors.write_error` (REST and websocket alike): a
:class:`J2CError` becomes its own status (4xx for bad input) with ``{"error", "message",
"field"}``; a pydantic validation error becomes 400 naming the field. No handler carries its own
try/except.

Every route requires Jupyter's authentication and then its authorization: each HTTP method is
declared with :func:`requires` (or :func:`ws_requires` for the websocket), which names the action
(``read``, ``write``, ``execute``) checked on the ``j2c`` resource by the server's
``Authorizer``. :data:`ROUTES` is the one table of routes; :func:`routes` refuses a handler
method that declares no action, so a new route cannot ship without one. This module also owns
the request caps (JSON body size, query integers, the default page of events) and the
redaction of ``token=`` in j2c's own log lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import wraps
from typing import Any, Final, TypeVar, cast
from urllib.parse import quote, urlencode

from jupyter_core.utils import ensure_async
from jupyter_server.auth.decorator import authorized, ws_authenticated
from jupyter_server.base.handlers import APIHandler, JupyterHandler
from jupyter_server.base.websocket import WebSocketMixin
from jupyter_server.log import _scrub_uri
from jupyter_server.utils import url_path_join
from pydantic import BaseModel, ValidationError
from tornado import web
from tornado.iostream import StreamClosedError
from tornado.websocket import WebSocketClosedError, WebSocketHandler, WebSocketProtocol13

from . import registry_paging
from .config import J2CSettings
from .defaults import defaults_for_browser
from .errors import InvalidInput, J2CError, validation_error_to_j2c
from .jobs.service import JobService
from .models import ArtifactCopy, ImageChoice, JobRequest, ServerConfig
from .schedulers import capabilities, known_backends

ModelT = TypeVar("ModelT", bound=BaseModel)
MethodT = TypeVar("MethodT", bound=Callable[..., Any])

AUTH_RESOURCE: Final = "j2c"
READ: Final = "read"
WRITE: Final = "write"
EXECUTE: Final = "execute"
ACTIONS: Final = frozenset({READ, WRITE, EXECUTE})
HTTP_METHODS: Final = ("get", "head", "post", "put", "patch", "delete", "options")
_ACTION_ATTR: Final = "__j2c_action__"
_FRAMEWORKS: Final = frozenset({"tornado", "jupyter_server"})

MAX_BODY_BYTES: Final = 1 << 20  # a job request is a few KiB; 1 MiB leaves ample room
MAX_SEQ: Final = 2**63 - 1  # SQLite's INTEGER: a larger ``after`` cannot name an event
DEFAULT_EVENTS_LIMIT: Final = 1000
MAX_EVENTS_LIMIT: Final = 10_000


class BodyTooLarge(J2CError):
    status_code = 413
    code = "body_too_large"


def requires(action: str) -> Callable[[MethodT], MethodT]:
    """Authentication, then Jupyter's authorization of ``action`` on the ``j2c`` resource
    (403 when the server's ``Authorizer`` says no). The action is recorded on the method, for
    :func:`declared_actions`."""
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}")

    def decorate(method: MethodT) -> MethodT:
        checked = cast(
            "MethodT", web.authenticated(authorized(action, resource=AUTH_RESOURCE)(method))
        )
        setattr(checked, _ACTION_ATTR, action)
        return checked

    return decorate


def ws_requires(action: str) -> Callable[[MethodT], MethodT]:
    """The websocket form of :func:`requires`, as jupyter_server's kernel and event sockets do
    it: authenticate without a login redirect, then ask the ``Authorizer`` before the upgrade,
    so a refused client gets a plain 403."""
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}")

    def decorate(method: MethodT) -> MethodT:
        @wraps(method)
        async def checked(self: JupyterHandler, *args: Any, **kwargs: Any) -> Any:
            allowed = await ensure_async(
                self.authorizer.is_authorized(self, self.current_user, action, AUTH_RESOURCE)
            )
            if not allowed:
                raise web.HTTPError(
                    403, f"User is not authorized to {action} on resource: {AUTH_RESOURCE}."
                )
            return await method(self, *args, **kwargs)

        wrapped = cast("MethodT", ws_authenticated(checked))
        setattr(wrapped, _ACTION_ATTR, action)
        return wrapped

    return decorate


def declared_actions(handler: type[web.RequestHandler]) -> dict[str, str | None]:
    """Each HTTP method the handler implements itself (not one inherited from tornado or
    jupyter_server) with its declared action, ``None`` where it declares none."""
    found: dict[str, str | None] = {}
    for name in HTTP_METHODS:
        owner = next((c for c in handler.__mro__ if name in vars(c)), None)
        if owner is None or owner.__module__.split(".")[0] in _FRAMEWORKS:
            continue
        found[name.upper()] = getattr(getattr(handler, name), _ACTION_ATTR, None)
    return found


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

    def _request_summary(self) -> str:
        # Tornado's own log lines use this; a ``?token=`` in the URL must not reach the log.
        return f"{self.request.method} {self.scrubbed_uri} ({self.request.remote_ip})"

    @property
    def scrubbed_uri(self) -> str:
        """The request URI with ``token=`` (and the like) redacted, as Jupyter's access log."""
        return _scrub_uri(self.request.uri or "", self.settings.get("extra_log_scrub_param_keys"))

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        # A user's bad input is not a server error: one line, no traceback.
        if isinstance(value, (J2CError, ValidationError)):
            self.log.info("j2c: %s %s: %s", self.request.method, self.scrubbed_uri, value)
            return
        if isinstance(value, web.HTTPError):
            # Tornado's version; it logs through _request_summary, scrubbed above.
            super().log_exception(typ, value, tb)
            return
        # Tornado's version would also log repr(request), whose URI is not scrubbed.
        self.log.error("Uncaught exception %s", self._request_summary(), exc_info=(typ, value, tb))

    @property
    def service(self) -> JobService:
        service: JobService = self.settings["j2c_service"]
        return service

    def int_argument(self, name: str, default: int, *, minimum: int = 0, maximum: int) -> int:
        """A query integer in ``[minimum, maximum]``, else a 400 naming the parameter."""
        raw = self.get_argument(name, None)
        if raw is None:
            return default
        # ASCII digits only: str.isdigit() also accepts "²", which int() then refuses.
        value = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 20 else None
        if value is None or not minimum <= value <= maximum:
            shown = raw if len(raw) <= 40 else raw[:40] + "..."
            raise InvalidInput(
                f"{name}: must be a whole number from {minimum} to {maximum}, not {shown!r}",
                field=name,
            )
        return value


@web.stream_request_body
class J2CHandler(J2CErrors, APIHandler):
    """Base for every j2c REST route: JSON in and out, bodies capped at
    :data:`MAX_BODY_BYTES` (413). The body is streamed so that an oversized one is refused from
    its ``Content-Length`` before it is read, and a chunked one is never held past the cap."""

    auth_resource = AUTH_RESOURCE
    _body: bytearray
    _body_too_large: bool = False

    async def prepare(self) -> None:  # type: ignore[override]
        await super().prepare()
        self._body = bytearray()
        declared = self.request.headers.get("Content-Length", "")
        # len() first: int() of thousands of digits is slow, then refused.
        digits = declared.isascii() and declared.isdigit()
        if digits and (len(declared) > 12 or int(declared) > MAX_BODY_BYTES):
            raise self._too_large()

    def data_received(self, chunk: bytes) -> None:
        # Only a chunked body gets here past the cap: it is read to the end and dropped.
        if self._body_too_large or len(self._body) + len(chunk) > MAX_BODY_BYTES:
            self._body_too_large = True
            self._body.clear()
            return
        self._body.extend(chunk)

    def _too_large(self) -> BodyTooLarge:
        return BodyTooLarge(
            f"request body: larger than the limit of {MAX_BODY_BYTES} bytes", field="body"
        )

    @property
    def j2c_settings(self) -> J2CSettings:
        settings: J2CSettings = self.settings["j2c_settings"]
        return settings

    def parse_body(self, model: type[ModelT]) -> ModelT:
        if self._body_too_large:
            raise self._too_large()
        try:
            raw = json.loads(bytes(self._body) or b"{}")
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
                default_scheduler=settings.scheduler.default,
                default_image=default_image,
                images=images,
                compression_level=settings.pack.compression_level,
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
        record = await self.service.submit(self.parse_body(JobRequest))
        self.set_header("Location", url_path_join(self.request.path, record.id))
        self.write_model(record, status=202)


class JobHandler(J2CHandler):
    @requires(READ)
    async def get(self, job_id: str) -> None:
        self.write_model(await self.service.get(job_id))

    @requires(WRITE)
    async def delete(self, job_id: str) -> None:
        await self.service.remove(job_id)
        self.set_status(204)
        self.finish()


class CancelHandler(J2CHandler):
    @requires(WRITE)
    async def post(self, job_id: str) -> None:
        self.write_model(await self.service.cancel(job_id))


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

    auth_resource = AUTH_RESOURCE

    @ws_requires(READ)
    async def get(self, job_id: str) -> None:
        # Bad input is a 400 before the upgrade, never a sender that dies after it.
        self._after = self.int_argument("after", 0, maximum=MAX_SEQ)
        await self.service.get(job_id)  # an unknown job is a 404 before the upgrade
        await super().get(job_id)

    def open(self, job_id: str) -> None:
        super().open()
        self._frames: list[bytes] = []
        self._flushed: asyncio.Future[None] | None = None
        self._pump = asyncio.create_task(self._send_events(job_id))

    async def _send_events(self, job_id: str) -> None:
        try:
            async for event in self.service.stream(job_id, self._after):
                slow = self._send(event.model_dump_json(exclude_defaults=True))
                if slow is not None:
                    # Back-pressure: a slow browser holds what the kernel's socket buffer
                    # holds plus one step's frames, then its follower's bounded queue; then
                    # it is caught up from the registry by seq. Never a growing buffer here.
                    await slow
        except (WebSocketClosedError, StreamClosedError):
            return
        except J2CError as exc:  # e.g. the server is stopping: 4503
            self._flush()
            # A close frame's reason holds at most 123 bytes.
            self.close(4000 + exc.status_code, exc.message.encode()[:120].decode(errors="ignore"))
            return
        except Exception:
            # A bug must still end the stream with a close the client can see.
            self.log.exception("j2c: event stream of %s failed (%s)", job_id, self.scrubbed_uri)
            self._flush()
            self.close(1011, "internal error; see the server log")
            return
        self._flush()  # the close frame goes after the last event
        self.close(1000, "job finished")

    def _send(self, text: str) -> Awaitable[None] | None:
        """Send one text message. The messages of one loop step (a burst of events) leave in
        one socket write at the step's end, not one write and one task each as through
        ``write_message``; returns what to await when the client reads slower than that."""
        conn = self.ws_connection
        if conn is None or conn.is_closing():
            raise WebSocketClosedError
        if not isinstance(conn, WebSocketProtocol13) or self.get_compression_options() is not None:
            return self.write_message(text)  # a deflating connection: tornado frames it
        self._frames.append(_text_frame(text.encode()))
        if len(self._frames) == 1:
            asyncio.get_running_loop().call_soon(self._flush)
        if self._flushed is not None and not self._flushed.done():
            return self._flushed
        return None

    def _flush(self) -> None:
        stream = getattr(self.ws_connection, "stream", None)
        if not self._frames or stream is None:
            return
        frames, self._frames = self._frames, []
        with contextlib.suppress(StreamClosedError):  # the next send says so
            self._flushed = stream.write(b"".join(frames))

    def on_message(self, message: str | bytes) -> None:
        """Clients only listen."""

    def on_close(self) -> None:
        if self._pump is not None:
            self._pump.cancel()


def available_schedulers() -> list[str]:
    return sorted(known_backends())


def _text_frame(payload: bytes) -> bytes:
    """One unfragmented, unmasked (server to client) websocket text frame (RFC 6455, 5.2)."""
    size = len(payload)
    if size < 126:
        return struct.pack("!BB", 0x81, size) + payload
    if size <= 0xFFFF:
        return struct.pack("!BBH", 0x81, 126, size) + payload
    return struct.pack("!BBQ", 0x81, 127, size) + payload


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
    Route(("jobs", _JOB_ID, "stream"), EventStreamHandler),
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
