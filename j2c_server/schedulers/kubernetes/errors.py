"""The Kubernetes API server's failures as j2c errors that say what to check (never a token):
unreachable is worth retrying, a certificate that does not verify or a refusal is not."""

from __future__ import annotations

import ssl

import httpx

from j2c_server.core.errors import SchedulerError, SchedulerUnavailable
from j2c_server.schedulers.kubernetes.auth import KubeConnection


def transport_error(exc: httpx.TransportError, conn: KubeConnection) -> SchedulerError:
    """Unreachable is worth retrying; a certificate that does not verify is not."""
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, ssl.SSLCertVerificationError):
        cause = cause.__cause__ or cause.__context__
    if cause is not None:
        return SchedulerError(
            f"the Kubernetes API server at {conn.server} has a certificate that does not "
            f"verify: {cause}",
            hint=f"check the certificate authority of {conn.source}",
        )
    return SchedulerUnavailable(
        f"cannot reach the Kubernetes API server at {conn.server}: {exc!s}",
        hint=f"check the server of {conn.source} and the network",
    )


def api_error(response: httpx.Response, conn: KubeConnection) -> SchedulerError:
    """A Kubernetes ``Status`` reply as an error that says what to check (never a token)."""
    try:
        body = response.json()
        message = str(body.get("message") or response.reason_phrase)
    except ValueError:
        message = response.reason_phrase
    code = response.status_code
    if code == 401:
        return SchedulerError(
            f"the Kubernetes API server rejected the credentials of {conn.source} "
            "(401 Unauthorized)",
            hint="the token or client certificate is wrong or expired; renew it",
        )
    if code == 403:
        return SchedulerError(
            f"Kubernetes refused the request (403 Forbidden): {message}",
            hint=f"grant create/get/patch/delete on jobs, get/list on pods and pods/log (and "
            f"delete on pods, to cancel one variant of a sweep) in namespace {conn.namespace}",
        )
    if code == 422:
        return SchedulerError(f"Kubernetes rejected the Job (422 Invalid): {message}")
    if code == 429 or code >= 500:
        return SchedulerUnavailable(f"the Kubernetes API server is unavailable ({code}): {message}")
    return SchedulerError(f"Kubernetes answered {code}: {message}")
