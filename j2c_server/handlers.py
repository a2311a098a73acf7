"""REST and websocket routes: thin adapters between HTTP and the job service.

Errors are mapped once, in :meth:`J2CHandler.write_error`: a :class:`J2CError` becomes its own
status (4xx for bad input) with ``{"error", "message", "field"}``; a pydantic validation error
becomes 400 naming the field. No handler carries its own try/except.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from pydantic import BaseModel, ValidationError
from tornado import web

from .config import J2CSettings
from .errors import InvalidInput, J2CError
from .models import ImageChoice, ServerConfig

ModelT = TypeVar("ModelT", bound=BaseModel)


def validation_error_to_j2c(exc: ValidationError) -> InvalidInput:
    first = exc.errors()[0]
    field = ".".join(str(p) for p in first["loc"]) or None
    message = f"{field}: {first['msg']}" if field else str(first["msg"])
    return InvalidInput(message, field=field)


class J2CHandler(APIHandler):
    """Base for every j2c route: JSON in and out, one error mapping."""

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
            self.finish(
                "["
                + ",".join(
                    m.model_dump_json() if isinstance(m, BaseModel) else json.dumps(m)
                    for m in model
                )
                + "]"
            )

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


def available_schedulers() -> list[str]:
    from .schedulers import BACKENDS

    return sorted(BACKENDS)


def routes(base_url: str = "/") -> list[tuple[str, type[Any]]]:
    """Every route of the extension; the auth test enumerates exactly this list."""
    api = url_path_join(base_url, "j2c", "api")
    return [
        (url_path_join(api, "config"), ConfigHandler),
    ]
