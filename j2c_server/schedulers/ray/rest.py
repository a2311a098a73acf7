"""The Ray Jobs REST client (the dashboard's ``/api/jobs/``): bearer-token auth, TLS options,
and the mapping of its answers to j2c errors.

The token comes from ``scheduler.ray.token_file`` (re-read whenever its modification time
changes, so it can be rotated), else ``$RAY_AUTH_TOKEN``; none: requests go without one (a
dashboard behind no auth). Tokens never appear in messages.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import httpx

from j2c_server.core.errors import ConfigError, SchedulerError, SchedulerUnavailable
from j2c_server.schedulers.ray.settings import RaySettings
from j2c_server.schedulers.rest_answer import json_object

TOKEN_ENV = "RAY_AUTH_TOKEN"  # noqa: S105 - a variable's name, not a token
_TIMEOUT = httpx.Timeout(30.0, connect=5.0)
_REACH_HINT = "check that the Ray head runs and that scheduler.ray.address is its dashboard URL"
_AUTH_HINT = "check the token in scheduler.ray.token_file (or $RAY_AUTH_TOKEN)"


class RayFailure(SchedulerError):
    """The dashboard refused a request; ``status`` is its HTTP status, ``text`` its body."""

    def __init__(self, message: str, status: int, text: str, *, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.status = status
        self.text = text


def _verify(settings: RaySettings) -> ssl.SSLContext | bool:
    if settings.ca_file:
        path = Path(settings.ca_file).expanduser()
        try:
            return ssl.create_default_context(cafile=str(path))
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                f"scheduler.ray.ca_file: cannot load {path}: {exc}", field="scheduler.ray.ca_file"
            ) from None
    return settings.verify_tls


def dashboard_url(settings: RaySettings) -> str:
    if not settings.address:
        raise ConfigError(
            "scheduler.ray.address is not set (the Ray dashboard's URL, e.g. http://head:8265)",
            field="scheduler.ray.address",
        )
    url = settings.address.rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(
            f"scheduler.ray.address must be an http:// or https:// URL, not {settings.address!r}",
            field="scheduler.ray.address",
            hint="the dashboard's address (port 8265 by default), not the GCS address",
        )
    return url


class TokenSource:
    def __init__(self, settings: RaySettings, environ: Mapping[str, str]) -> None:
        self._file = settings.token_file
        self._environ = environ
        self._value: str | None = None
        self._mtime: int | None = None

    async def current(self) -> str | None:
        if self._file:
            return await asyncio.to_thread(self._read, self._file)
        return self._environ.get(TOKEN_ENV) or None

    def _read(self, name: str) -> str:
        path = Path(name).expanduser()
        try:
            mtime = path.stat().st_mtime_ns
            if self._value is None or mtime != self._mtime:
                self._value, self._mtime = path.read_text().strip(), mtime
        except OSError as exc:
            raise ConfigError(
                f"cannot read the Ray token file {path}: {exc.strerror}",
                field="scheduler.ray.token_file",
            ) from None
        if not self._value:
            raise ConfigError(
                f"the Ray token file {path} is empty", field="scheduler.ray.token_file"
            )
        return self._value


class RayRest:
    """``/api/...`` requests with the token attached; answers as dicts."""

    def __init__(self, settings: RaySettings, environ: Mapping[str, str] | None = None) -> None:
        self.url = dashboard_url(settings)
        self._tokens = TokenSource(settings, os.environ if environ is None else environ)
        verify = _verify(settings)
        self._client = httpx.AsyncClient(base_url=self.url, timeout=_TIMEOUT, verify=verify)
        # aiohttp's: True checks certificates, False does not, or the given CA's context.
        self._ssl: ssl.SSLContext | bool = verify
        self._tails: set[aiohttp.ClientSession] = set()

    async def request(
        self, method: str, path: str, *, json_body: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        response = await self._send(method, path, json_body)
        return json_object(
            response,
            "the Ray dashboard",
            f"{method} {path}",
            "is scheduler.ray.address the dashboard (port 8265), not another service?",
        )

    async def list_jobs(self) -> list[dict[str, Any]]:
        """Every job the cluster knows (``GET /api/jobs/``, a JSON list), whoever sent it."""
        try:
            data = (await self._send("GET", "/api/jobs/", None)).json()
        except ValueError:
            return []
        return [job for job in data if isinstance(job, dict)] if isinstance(data, list) else []

    async def _send(
        self, method: str, path: str, json_body: dict[str, Any] | None
    ) -> httpx.Response:
        token = await self._tokens.current()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            response = await self._client.request(method, path, json=json_body, headers=headers)
        except httpx.TransportError as exc:
            reason = str(exc) or type(exc).__name__
            raise SchedulerUnavailable(
                f"the Ray dashboard at {self.url} cannot be reached ({reason})", hint=_REACH_HINT
            ) from None
        what = f"{method} {path}"
        if response.status_code in (401, 403):
            raise RayFailure(
                f"the Ray dashboard refused {what}: not authorized",
                response.status_code,
                "",
                hint=_AUTH_HINT,
            )
        if response.status_code in (502, 503, 504):
            raise SchedulerUnavailable(
                f"the Ray dashboard at {self.url} is unavailable (HTTP {response.status_code})",
                hint=_REACH_HINT,
            )
        if response.status_code >= 400:
            text = response.text
            # Ray answers with a Python traceback: its last line is the reason.
            reason = text.strip().splitlines()[-1] if text.strip() else "no details"
            raise RayFailure(
                f"Ray refused {what} (HTTP {response.status_code}): {reason[:500]}",
                response.status_code,
                text,
            )
        return response

    async def tail(self, ray_id: str) -> AsyncIterator[str]:
        """The job's log as text chunks from the tail websocket, from its start; ends when Ray
        closes it (the job ended) or the job is unknown. Compression off: Ray's tail does not
        deliver compressed frames."""
        token = await self._tokens.current()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        url = f"{self.url}/api/jobs/{ray_id}/logs/tail"
        session = aiohttp.ClientSession(headers=headers)
        self._tails.add(session)  # closed by close(), should a follower be abandoned
        try:
            async with session.ws_connect(url, compress=0, ssl=self._ssl, heartbeat=30) as socket:
                async for message in socket:
                    if message.type == aiohttp.WSMsgType.TEXT:
                        yield str(message.data)
                    elif message.type == aiohttp.WSMsgType.ERROR:
                        break
        except aiohttp.WSServerHandshakeError as exc:
            if exc.status in (401, 403):
                raise RayFailure(
                    f"the Ray dashboard refused the log of {ray_id}: not authorized",
                    exc.status,
                    "",
                    hint=_AUTH_HINT,
                ) from None
            if exc.status == 404:
                return
            raise SchedulerUnavailable(
                f"the Ray dashboard at {self.url} did not open the log of {ray_id} "
                f"(HTTP {exc.status})",
                hint=_REACH_HINT,
            ) from None
        except (aiohttp.ClientError, OSError) as exc:
            reason = str(exc) or type(exc).__name__
            raise SchedulerUnavailable(
                f"the Ray dashboard at {self.url} cannot be reached ({reason})", hint=_REACH_HINT
            ) from None
        finally:
            self._tails.discard(session)
            await session.close()

    async def close(self) -> None:
        await self._client.aclose()
        for session in list(self._tails):
            await session.close()
        self._tails.clear()
