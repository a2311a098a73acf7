"""Uploads through a presigned POST policy: how a job without storage credentials writes its
outputs (``storage.presign_for_jobs``).

The server signs a policy (S3's browser-form upload, :meth:`S3Store.presign_post`) that allows
keys starting with the job's own ``jobs/<id>/outputs/`` prefix only (a ``starts-with`` condition
on ``$key``), files up to a size (``content-length-range``) and until an expiry. The job gets it
in ``$J2C_OUTPUTS_POST_CREDENTIAL`` (:data:`ENV_NAME`: a credential by its name, so it is masked
wherever a job spec is shown and never written to a backend's files) and POSTs each file as
``multipart/form-data``: the policy's fields, the key, then the file, streamed from disk.

The store enforces the conditions; this module only refuses to send a key outside the prefix it
was given (the store would refuse it too, with a less readable error). A POST policy cannot
delete: :meth:`PostPolicyStore.delete` says so, and the outputs sync names what stays.

Standard library only (``http.client``): ``j2c-unpack`` imports it, on a job with the variable.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import re
import secrets
import ssl
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from j2c_server.core.backoff import Backoff, retry_sync
from j2c_server.core.errors import InvalidInput, StorageError
from j2c_server.storage.retry import RetryableStatus

ENV_NAME = "J2C_OUTPUTS_POST_CREDENTIAL"
FIELD = ENV_NAME
_CHUNK = 1 << 20
_OK = frozenset({200, 201, 204})
_XML_TEXT = re.compile(r"<(Code|Message)>([^<]*)</\1>")


@dataclass(frozen=True)
class PostPolicy:
    """A signed upload form: where to POST (``url``), its fields (the policy, the signature and
    the credential scope), and the key ``prefix`` its ``starts-with`` condition allows."""

    url: str
    prefix: str
    fields: dict[str, str] = field(default_factory=dict)
    max_bytes: int | None = None
    expires_at: str | None = None

    def to_json(self) -> str:
        return json.dumps(
            {
                "url": self.url,
                "prefix": self.prefix,
                "fields": self.fields,
                "max_bytes": self.max_bytes,
                "expires_at": self.expires_at,
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> PostPolicy:
        """The policy in ``$J2C_OUTPUTS_POST_CREDENTIAL``; anything else is an InvalidInput."""
        try:
            raw = json.loads(text)
            url, prefix, fields = raw["url"], raw["prefix"], raw["fields"]
        except (ValueError, TypeError, KeyError):
            raise InvalidInput(
                f"${ENV_NAME} is not an upload policy (JSON with url, prefix and fields)",
                field=FIELD,
            ) from None
        if not (
            isinstance(url, str)
            and urlsplit(url).scheme in ("http", "https")
            and isinstance(prefix, str)
            and isinstance(fields, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in fields.items())
        ):
            raise InvalidInput(f"${ENV_NAME} holds a malformed upload policy", field=FIELD)
        max_bytes = raw.get("max_bytes")
        expires_at = raw.get("expires_at")
        return cls(
            url,
            prefix,
            dict(fields),
            max_bytes if isinstance(max_bytes, int) else None,
            expires_at if isinstance(expires_at, str) else None,
        )


class PostPolicyStore:
    """What the outputs sync needs of a store (``put_file``, ``put_bytes``, ``delete``,
    ``close``), over one policy. Keys are relative to ``base``, a full key prefix inside the
    policy's (rank k's ``.../outputs/rank-<k>/``)."""

    kind = "post-policy"

    def __init__(
        self, policy: PostPolicy, base: str, *, attempts: int = 5, timeout_s: float = 60.0
    ) -> None:
        base = base.rstrip("/") + "/"
        if not base.startswith(policy.prefix):
            raise InvalidInput(
                f"the outputs go to {base!r}, outside the upload policy's prefix {policy.prefix!r}",
                field=FIELD,
            )
        self.policy = policy
        self.base = base
        self.attempts = attempts
        self.timeout_s = timeout_s

    def uri(self, key: str) -> str:
        return f"{self.policy.url.rstrip('/')}/{self.base}{key}"

    async def put_file(self, key: str, path: Path) -> bool:
        await asyncio.to_thread(self._upload, key, path, None)
        return True

    async def put_bytes(self, key: str, data: bytes) -> None:
        await asyncio.to_thread(self._upload, key, None, data)

    async def delete(self, key: str) -> None:
        raise StorageError(
            f"cannot delete {self.base}{key}: the job's upload policy only adds objects",
            hint="a presigned job's outputs that it deleted stay in the store, unlisted",
        )

    async def close(self) -> None:
        return None

    # ------------------------------------------------------------------ one POST

    def _upload(self, key: str, path: Path | None, data: bytes | None) -> None:
        full = self.base + key
        if not full.startswith(self.policy.prefix) or "/../" in f"/{full}/":
            raise InvalidInput(
                f"{full!r} is outside the upload policy's prefix {self.policy.prefix!r}",
                field=FIELD,
            )
        size = path.stat().st_size if path is not None else len(data or b"")

        def on_retry(exc: BaseException, attempt: int, delay: float) -> None:
            return None  # the sync's own message says what failed in the end

        backoff = Backoff(
            lambda exc: isinstance(exc, RetryableStatus | ConnectionError | TimeoutError),
            on_retry,
            attempts=self.attempts,
            base_s=0.5,
            max_s=10.0,
            jitter=True,
        )
        retry_sync(lambda: self._post(full, size, path, data), backoff)

    def _post(self, key: str, size: int, path: Path | None, data: bytes | None) -> None:
        boundary = "j2c-" + secrets.token_hex(16)
        head = b"".join(
            _part(boundary, name, value)
            for name, value in {**self.policy.fields, "key": key}.items()
        )
        head += (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="upload"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        tail = f"\r\n--{boundary}--\r\n".encode()
        target = urlsplit(self.policy.url)
        connection = _connection(target.scheme, target.netloc, self.timeout_s)
        try:
            connection.putrequest("POST", target.path or "/")
            connection.putheader("Content-Type", f"multipart/form-data; boundary={boundary}")
            connection.putheader("Content-Length", str(len(head) + size + len(tail)))
            connection.endheaders()
            connection.send(head)
            for chunk in _body(path, data, size):
                connection.send(chunk)
            connection.send(tail)
            response = connection.getresponse()
            answer = response.read(64 * 1024).decode("utf-8", "replace")
        finally:
            connection.close()
        if response.status in _OK:
            return
        if response.status >= 500 or response.status == 429:
            raise RetryableStatus(response.status)
        found = dict(_XML_TEXT.findall(answer))
        detail = ": ".join(part for part in (found.get("Code"), found.get("Message")) if part)
        raise StorageError(
            f"the store refused {key} (HTTP {response.status}"
            + (f", {detail})" if detail else ")"),
            hint=f"the job's upload policy allows keys under {self.policy.prefix}"
            + (f", files up to {self.policy.max_bytes} bytes" if self.policy.max_bytes else "")
            + (f", until {self.policy.expires_at}" if self.policy.expires_at else "")
            + "; submit the job again for a fresh one",
        )


def _part(boundary: str, name: str, value: str) -> bytes:
    return (
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
    ).encode()


def _body(path: Path | None, data: bytes | None, size: int) -> Iterator[bytes]:
    """Exactly ``size`` bytes: the file's, streamed, or ``data``; a file that shrank while it
    was sent is an OSError (the sync then leaves it for the next round)."""
    if path is None:
        yield data or b""
        return
    left = size
    with path.open("rb") as handle:
        while left > 0:
            chunk = handle.read(min(_CHUNK, left))
            if not chunk:
                raise OSError(f"{path.name} shrank while it was uploaded")
            left -= len(chunk)
            yield chunk


def _connection(scheme: str, netloc: str, timeout_s: float) -> http.client.HTTPConnection:
    if scheme == "https":
        return http.client.HTTPSConnection(
            netloc, timeout=timeout_s, context=ssl.create_default_context()
        )
    return http.client.HTTPConnection(netloc, timeout=timeout_s)
