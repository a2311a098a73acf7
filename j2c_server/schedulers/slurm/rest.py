"""The slurmrestd client: JWT authentication and the mapping of its answers to j2c errors.

The token comes from ``scheduler.slurm.token``, else ``scheduler.slurm.token_file`` (re-read
whenever its modification time changes, so a cron job can rotate it), else ``$SLURM_JWT``. The
user name sent with it is ``scheduler.slurm.user``, else the token's own ``sun`` claim. Tokens
never appear in messages.

slurmrestd reports most failures as HTTP 500 with Slurm error numbers in the body; a token that
slurmctld rejects shows up as an "Unspecified error" or a dropped connection, never as a 401.
:class:`SlurmFailure` keeps those numbers so callers can turn the ones they expect (an unknown
job id, an impossible resource request) into precise errors.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from j2c_server.core.errors import ConfigError, SchedulerError, SchedulerUnavailable
from j2c_server.schedulers.rest_answer import json_object
from j2c_server.schedulers.slurm.settings import SlurmSettings

# Slurm error numbers (slurm_errno.h) that mean "slurmctld is unreachable from slurmrestd".
_CONTROLLER_DOWN = {1001, 1002, 1003, 1004, 5004}
# ... and the ones slurmctld's rejection of a token turns into.
_AUTH_REJECTED = {-1, 5005, 1007}
_AUTH_HINT = (
    "check the token: mint one with `scontrol token username=USER lifespan=SECONDS` and put it in "
    "scheduler.slurm.token_file (or $SLURM_JWT)"
)
_REACH_HINT = "check that slurmrestd runs and that scheduler.slurm.url points at it"
_TIMEOUT = httpx.Timeout(30.0, connect=5.0)


class SlurmFailure(SchedulerError):
    """slurmrestd answered with Slurm errors; ``numbers`` holds their Slurm error numbers."""

    def __init__(self, message: str, numbers: list[int], *, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.numbers = numbers


@dataclass
class _Token:
    value: str
    user: str | None
    expires_at: float | None


def _claims(token: str) -> dict[str, Any]:
    """The JWT's payload, unverified (slurmctld verifies it); {} when it is not a JWT."""
    try:
        payload = token.split(".")[1]
        data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError, binascii.Error):
        return {}
    return data if isinstance(data, dict) else {}


def _parse_token(raw: str) -> _Token:
    # `scontrol token` prints "SLURM_JWT=<token>"; accept a file holding that line as it is.
    value = raw.strip().removeprefix("SLURM_JWT=").strip()
    claims = _claims(value)
    sun, exp = claims.get("sun"), claims.get("exp")
    return _Token(
        value=value,
        user=sun if isinstance(sun, str) else None,
        expires_at=float(exp) if isinstance(exp, int | float) else None,
    )


class TokenSource:
    """Where the JWT comes from; see the module docstring for the order."""

    def __init__(self, settings: SlurmSettings, environ: Mapping[str, str]) -> None:
        self._settings = settings
        self._environ = environ
        self._file_token: _Token | None = None
        self._file_mtime: int | None = None

    async def current(self) -> _Token:
        if self._settings.token:
            token = _parse_token(self._settings.token)
        elif self._settings.token_file:
            token = await asyncio.to_thread(self._read_file, self._settings.token_file)
        elif self._environ.get("SLURM_JWT"):
            token = _parse_token(self._environ["SLURM_JWT"])
        else:
            raise ConfigError(
                "no Slurm token: set scheduler.slurm.token_file (or scheduler.slurm.token, or "
                "$SLURM_JWT in the server's environment)",
                field="scheduler.slurm.token_file",
            )
        if not token.value:
            raise ConfigError("the Slurm token is empty", field="scheduler.slurm.token_file")
        if token.expires_at is not None and token.expires_at < time.time():
            expired = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(token.expires_at))
            raise SchedulerError(f"the Slurm token expired at {expired}", hint=_AUTH_HINT)
        return token

    def _read_file(self, name: str) -> _Token:
        path = Path(name).expanduser()
        try:
            mtime = path.stat().st_mtime_ns
            if self._file_token is None or mtime != self._file_mtime:
                self._file_token = _parse_token(path.read_text())
                self._file_mtime = mtime
        except OSError as exc:
            raise ConfigError(
                f"cannot read the Slurm token file {path}: {exc.strerror}",
                field="scheduler.slurm.token_file",
            ) from None
        return self._file_token


def _errors(body: dict[str, Any]) -> tuple[list[int], str]:
    """Slurm's error numbers and one readable message from a response body."""
    numbers: list[int] = []
    texts: list[str] = []
    for entry in body.get("errors") or []:
        if not isinstance(entry, dict):
            continue
        number = entry.get("error_number", entry.get("error_code"))
        if isinstance(number, int):
            numbers.append(number)
        text = entry.get("description") or entry.get("error")
        if text and text not in texts:
            texts.append(str(text))
    return numbers, "; ".join(texts) or "no details"


class SlurmRest:
    """``/slurm/<api_version>/...`` requests with the token attached, answers as dicts."""

    def __init__(self, settings: SlurmSettings, environ: Mapping[str, str] | None = None) -> None:
        if not settings.url:
            raise ConfigError(
                "scheduler.slurm.url is not set (the slurmrestd base URL)",
                field="scheduler.slurm.url",
            )
        self._settings = settings
        self._url = settings.url.rstrip("/")
        self._tokens = TokenSource(settings, os.environ if environ is None else environ)
        self._client = httpx.AsyncClient(
            base_url=f"{self._url}/slurm/{settings.api_version}", timeout=_TIMEOUT
        )

    async def user(self) -> str:
        """The Slurm user every request acts as."""
        return self._user(await self._tokens.current())

    def _user(self, token: _Token) -> str:
        user = self._settings.user or token.user
        if not user:
            raise ConfigError(
                "scheduler.slurm.user is not set and the token names no user ('sun' claim)",
                field="scheduler.slurm.user",
            )
        return user

    async def get(self, path: str) -> dict[str, Any]:
        return await self.request("GET", path)

    async def request(
        self,
        method: str,
        path: str,
        *,
        json_body: dict[str, Any] | None = None,
        params: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        token = await self._tokens.current()
        headers = {"X-SLURM-USER-NAME": self._user(token), "X-SLURM-USER-TOKEN": token.value}
        try:
            response = await self._client.request(
                method, path, json=json_body, params=params, headers=headers
            )
        except httpx.TransportError as exc:
            reason = str(exc) or type(exc).__name__
            raise SchedulerUnavailable(
                f"slurmrestd at {self._url} cannot be reached ({reason})", hint=_REACH_HINT
            ) from None
        return self._answer(method, path, response)

    def _answer(self, method: str, path: str, response: httpx.Response) -> dict[str, Any]:
        what = f"{method} {path}"
        if response.status_code in (401, 403):
            raise SchedulerError(
                f"slurmrestd refused {what}: authentication failure", hint=_AUTH_HINT
            )
        if response.status_code == 404:
            raise SchedulerError(
                f"slurmrestd at {self._url} does not serve /slurm/{self._settings.api_version}"
                f"{path}",
                hint="check scheduler.slurm.api_version against the plugins slurmrestd loads "
                "(slurmrestd -s openapi/v0.0.38)",
            )
        if response.status_code in (502, 503, 504):
            raise SchedulerUnavailable(
                f"slurmrestd at {self._url} is unavailable (HTTP {response.status_code})",
                hint=_REACH_HINT,
            )
        body = json_object(
            response,
            "slurmrestd",
            what,
            "is scheduler.slurm.url the slurmrestd address, not another service?",
        )
        if response.status_code < 400:
            return body
        numbers, message = _errors(body)
        if _CONTROLLER_DOWN.intersection(numbers):
            raise SchedulerUnavailable(
                f"slurmrestd cannot reach slurmctld ({message})",
                hint="slurmctld may be restarting; j2c retries",
            )
        if set(numbers) and set(numbers) <= _AUTH_REJECTED:
            raise SlurmFailure(
                f"Slurm refused {what}: {message} (slurmrestd reports a rejected token this way)",
                numbers,
                hint=_AUTH_HINT,
            )
        raise SlurmFailure(f"Slurm refused {what}: {message}", numbers)

    async def close(self) -> None:
        await self._client.aclose()
