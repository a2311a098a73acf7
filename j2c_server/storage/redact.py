"""Redaction of secrets in URLs, so a presigned URL or an endpoint can be logged safely.

A presigned URL is a bearer credential until it expires: anyone holding it can read the object.
Whatever j2c logs, records or shows about a URL goes through :func:`redact_url` first, and
:func:`install_log_redaction` filters the loggers of the HTTP and AWS libraries j2c drives
(httpx logs every request URL at INFO; botocore logs signed requests at DEBUG).
"""

from __future__ import annotations

import logging
import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

REDACTED = "REDACTED"

# Query parameters that carry a signature, a credential or a token (AWS SigV4/SigV2, GCS,
# Azure SAS and generic bearer tokens). Compared case-insensitively.
_SECRET_PARAMS = frozenset(
    name.lower()
    for name in (
        "X-Amz-Signature",
        "X-Amz-Credential",
        "X-Amz-Security-Token",
        "Signature",
        "AWSAccessKeyId",
        "x-amz-security-token",
        "X-Goog-Signature",
        "X-Goog-Credential",
        "sig",
        "token",
        "access_token",
    )
)
_URL_IN_TEXT = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>]+")
# "Signature=...", "Credential=...", "Signature:\n..." and "'X-Amz-Security-Token': b'..." as
# they appear in signed headers and in botocore's signing logs.
_SECRET_FIELD = re.compile(
    r"(?i)(signature|credential|security-token|authorization)([\s'\":=b]{1,6})([^\s,'\"&]{8,})"
)
# Loggers of libraries j2c drives that can print URLs, signatures or credential ids.
_NOISY_LOGGERS = (
    "httpx",
    "botocore.endpoint",
    "botocore.auth",
    "botocore.parsers",
    "botocore.hooks",
    "aiobotocore.endpoint",
    "aiobotocore.httpsession",
)


def redact_url(url: str) -> str:
    """``url`` with the values of secret query parameters and any ``user:password@`` replaced."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return REDACTED
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{REDACTED}@{netloc.rpartition('@')[2]}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode(
            [(k, REDACTED if k.lower() in _SECRET_PARAMS else v) for k, v in pairs],
            safe="/:",
        )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_text(text: str) -> str:
    """``text`` with every URL and every signature or credential field in it redacted."""
    text = _URL_IN_TEXT.sub(lambda match: redact_url(match.group(0)), text)
    return _SECRET_FIELD.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)


class RedactingFilter(logging.Filter):
    """Rewrites each record's message with :func:`redact_text` before any handler sees it."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact_text(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


_FILTER = RedactingFilter()


def install_log_redaction() -> None:
    """Attach the redacting filter to the loggers of httpx and botocore (idempotent)."""
    for name in _NOISY_LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
