"""Bearer tokens for the Kubernetes API, re-evaluated on every request, cheaply.

A static token from the kubeconfig; a token file, re-read when it changes (kubelet rotates
projected service-account tokens); an ``exec`` credential plugin, re-run when its token is about
to expire. :class:`BearerAuth` puts the current token on each request, and a 401 forces one
refresh and retry. Tokens never appear in messages.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncGenerator, Generator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Protocol

import httpx

from j2c_server.core.errors import ConfigError, SchedulerError
from j2c_server.core.process_output import output_within

_SETTING = "scheduler.kubernetes.kubeconfig"
_EXEC_TIMEOUT_S = 60.0
# An exec token this close to its expiry is renewed before use, not after a 401.
_EXPIRY_MARGIN_S = 30.0


class TokenSource(Protocol):
    async def token(self, *, refresh: bool = False) -> str: ...


@dataclass
class StaticToken:
    value: str

    async def token(self, *, refresh: bool = False) -> str:
        return self.value


@dataclass
class TokenFile:
    """A token file, re-read whenever it changes (or on a 401)."""

    path: Path
    _value: str = ""
    _stamp: tuple[int, int, int] | None = None

    async def token(self, *, refresh: bool = False) -> str:
        try:
            st = self.path.stat()
        except OSError as exc:
            raise SchedulerError(
                f"cannot read the Kubernetes token file {self.path}: {exc.strerror}"
            ) from None
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        # A stat per request is cheap; the (tiny) file is read only when it changed.
        if refresh or stamp != self._stamp:
            self._value = self.path.read_text().strip()
            self._stamp = stamp
        return self._value


@dataclass
class ExecPlugin:
    """A client-go ``exec`` credential plugin (ExecCredential with a bearer token)."""

    command: str
    args: list[str]
    env: dict[str, str]
    api_version: str
    install_hint: str | None = None
    _value: str = ""
    _expires: float | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def token(self, *, refresh: bool = False) -> str:
        async with self._lock:
            fresh = self._value and (
                self._expires is None or self._expires - _EXPIRY_MARGIN_S > time.time()
            )
            if refresh or not fresh:
                self._value, self._expires = await self._run()
            return self._value

    async def _run(self) -> tuple[str, float | None]:
        info = {
            "apiVersion": self.api_version,
            "kind": "ExecCredential",
            "spec": {"interactive": False},
        }
        env = {**os.environ, **self.env, "KUBERNETES_EXEC_INFO": json.dumps(info)}
        try:
            proc = await asyncio.create_subprocess_exec(
                self.command,
                *self.args,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as exc:
            raise ConfigError(
                f"kubeconfig exec plugin {self.command!r} cannot run: {exc.strerror}",
                field=_SETTING,
                hint=self.install_hint,
            ) from None
        output = await output_within(proc, _EXEC_TIMEOUT_S)
        if output is None:
            raise SchedulerError(
                f"kubeconfig exec plugin {self.command!r} did not answer in {_EXEC_TIMEOUT_S:.0f} s"
            ) from None
        out, err = output
        if proc.returncode != 0:
            detail = err.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise SchedulerError(
                f"kubeconfig exec plugin {self.command!r} failed (exit {proc.returncode}): "
                f"{detail[0]}"
            )
        return _parse_exec_credential(out, self.command)


def _parse_exec_credential(out: bytes, command: str) -> tuple[str, float | None]:
    try:
        status = json.loads(out)["status"]
    except (ValueError, KeyError, TypeError):
        raise SchedulerError(
            f"kubeconfig exec plugin {command!r} did not print an ExecCredential with a status"
        ) from None
    token = status.get("token") if isinstance(status, dict) else None
    if not token:
        raise ConfigError(
            f"kubeconfig exec plugin {command!r} returned no token; plugins that return client "
            "certificates are not supported",
            field=_SETTING,
        )
    expiry = status.get("expirationTimestamp")
    if not expiry:
        return str(token), None
    try:
        expires = datetime.fromisoformat(str(expiry).replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise SchedulerError(
            f"kubeconfig exec plugin {command!r} returned a bad expirationTimestamp {expiry!r}"
        ) from None
    return str(token), expires


class BearerAuth(httpx.Auth):
    """Adds the current token to each request; on a 401 refreshes it once and retries."""

    def __init__(self, source: TokenSource) -> None:
        self._source = source

    async def async_auth_flow(
        self, request: httpx.Request
    ) -> AsyncGenerator[httpx.Request, httpx.Response]:
        request.headers["Authorization"] = f"Bearer {await self._source.token()}"
        response = yield request
        if response.status_code == 401 and not isinstance(self._source, StaticToken):
            request.headers["Authorization"] = f"Bearer {await self._source.token(refresh=True)}"
            yield request

    def sync_auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response]:
        raise RuntimeError("the Kubernetes client is async only")
