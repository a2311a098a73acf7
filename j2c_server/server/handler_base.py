"""What every j2c route shares: the authorization declared per HTTP method, the one error mapping,
the request caps, and token redaction in j2c's own log lines.

Errors are mapped once, in :meth:`J2CErrors.write_error` (REST and websocket alike): a
:class:`J2CError` becomes its own status (4xx for bad input) with ``{"error", "message",
"field"}``; a pydantic validation error becomes 400 naming the field. No handler carries its own
try/except. :func:`requires` (:func:`ws_requires` for a websocket) names the action (``read``,
``write``, ``execute``) the server's ``Authorizer`` checks on the ``j2c`` resource.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import wraps
from typing import Any, Final, TypeVar, cast

from jupyter_core.utils import ensure_async
from jupyter_server.auth.decorator import authorized, ws_authenticated
from jupyter_server.base.handlers import APIHandler, JupyterHandler
from jupyter_server.log import _scrub_uri
from pydantic import BaseModel, ValidationError
from tornado import web

from j2c_server.config import J2CSettings
from j2c_server.core.errors import (
    DiskFull,
    InvalidInput,
    J2CError,
    disk_full_to_j2c,
    validation_error_to_j2c,
)
from j2c_server.jobs.audit import Actor
from j2c_server.jobs.service import JobService

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
        exc = self._disk_full(exc) or exc
        if isinstance(exc, J2CError):
            self.set_status(exc.status_code)
            self.set_header("Content-Type", "application/json")
            self.finish(json.dumps(exc.to_dict()))
            return
        super().write_error(status_code, **kwargs)

    def _disk_full(self, exc: BaseException | None) -> DiskFull | None:
        settings: J2CSettings = self.settings["j2c_settings"]
        return disk_full_to_j2c(exc, str(settings.data_path()))

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
        if (full := self._disk_full(value)) is not None:  # the machine's state, not a bug
            self.log.warning("j2c: %s %s: %s", self.request.method, self.scrubbed_uri, full)
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

    @property
    def actor(self) -> Actor:
        """The Jupyter user making the request (behind JupyterHub: the hub user's name)."""
        user = self.current_user
        name = getattr(user, "username", None) or getattr(user, "name", None) or str(user)
        return Actor(user=str(name), frontend="rest")

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
