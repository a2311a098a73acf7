"""redact_url / redact_text: what may be logged about a URL."""

from __future__ import annotations

import logging

import pytest

from j2c_server.storage.redact import install_log_redaction, redact_text, redact_url

PRESIGNED = (
    "https://bucket.s3.amazonaws.com/blobs/sha256/ab.tar.zst?X-Amz-Algorithm=AWS4-HMAC-SHA256"
    "&X-Amz-Credential=AKIAEXAMPLEKEY%2F20260101%2Fus-east-1%2Fs3%2Faws4_request"
    "&X-Amz-Date=20260101T000000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host"
    "&X-Amz-Security-Token=FQoGZXIvYXdzEXAMPLETOKEN"
    "&X-Amz-Signature=0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0"
)


def test_presigned_url_keeps_location_and_expiry_but_not_signature_or_credential() -> None:
    shown = redact_url(PRESIGNED)
    assert shown.startswith("https://bucket.s3.amazonaws.com/blobs/sha256/ab.tar.zst?")
    assert "X-Amz-Expires=3600" in shown
    assert "X-Amz-Signature=REDACTED" in shown
    for secret in ("0f1e2d3c4b5a", "AKIAEXAMPLEKEY", "FQoGZXIvYXdzEXAMPLETOKEN"):
        assert secret not in shown


def test_sigv2_style_query_is_redacted() -> None:
    shown = redact_url("https://h/k?AWSAccessKeyId=AKIAOLD&Expires=1&Signature=abc%2Bdef")
    assert "AKIAOLD" not in shown and "abc" not in shown
    assert "Expires=1" in shown


def test_user_and_password_in_a_url_are_redacted() -> None:
    assert redact_url("http://admin:hunter2@minio:9000/") == "http://REDACTED@minio:9000/"


@pytest.mark.parametrize("url", ["s3://bucket/key", "file:///tmp/x", "https://h/p?a=1"])
def test_urls_without_secrets_are_unchanged(url: str) -> None:
    assert redact_url(url) == url


def test_text_quoting_a_presigned_url_and_a_signed_header_is_redacted() -> None:
    text = (
        f"GET {PRESIGNED} failed; headers={{'Authorization': b'AWS4-HMAC-SHA256 "
        "Credential=AKIAEXAMPLEKEY/20260101/us-east-1/s3/aws4_request, "
        "SignedHeaders=host, Signature=0123456789abcdef0123456789abcdef'}"
    )
    shown = redact_text(text)
    assert "AKIAEXAMPLEKEY" not in shown
    assert "0123456789abcdef" not in shown
    assert "0f1e2d3c4b5a" not in shown


def test_installed_filter_redacts_httpx_request_log_lines(
    caplog: pytest.LogCaptureFixture,
) -> None:
    install_log_redaction()
    with caplog.at_level(logging.INFO, logger="httpx"):
        logging.getLogger("httpx").info("HTTP Request: %s %s", "GET", PRESIGNED)
    assert "X-Amz-Signature=REDACTED" in caplog.text
    assert "0f1e2d3c4b5a" not in caplog.text
