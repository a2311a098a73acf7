"""How the REST backends (Slurm's slurmrestd, Ray's dashboard) read an answer's body: a JSON
object, or an error that says the address may be another service's."""

from __future__ import annotations

from typing import Any

import httpx

from j2c_server.core.errors import SchedulerError


def json_object(response: httpx.Response, service: str, what: str, hint: str) -> dict[str, Any]:
    """The answer's JSON object; a :class:`SchedulerError` naming ``service`` and the request
    ``what`` when the body is none (an HTML page, an empty body, a JSON list)."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise SchedulerError(
            f"{service} answered {what} with HTTP {response.status_code} and no JSON object",
            hint=hint,
        )
    return body
