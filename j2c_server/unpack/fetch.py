"""Reading from the store: the manifest (checked against its pinned sha256), and any object's
bytes streamed to a file with their sha256 (:func:`download`, which downloads.py runs for the
layers and big files).

Where a layer comes from: its ``url`` when the manifest has one (e.g. a presigned URL), else the
store that holds the manifest: ``<root>/blobs/sha256/<hex>.tar.zst`` next to
``<root>/manifests/sha256/<hex>.json`` (or ``<root>/jobs/<id>/<name>.json``); the layout is
storage/base.py's. ``file://`` and ``http(s)://`` are read here with the standard library;
``s3://`` goes through the storage package, imported only then because it brings the S3 client
(and the storage package's import cost would otherwise land on every job's start-up).

"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar
from urllib.parse import unquote, urlsplit, urlunsplit

from j2c_server.core.backoff import Backoff, retry_sync
from j2c_server.core.errors import J2CError
from j2c_server.core.manifest_plan import LayerPlan, ManifestPlan
from j2c_server.core.units import byte_size, count
from j2c_server.unpack.cache.plans import dump_without_urls, without_urls
from j2c_server.unpack.errors import LayerCorrupt, LayerMissing, ManifestInvalid, StoreUnavailable
from j2c_server.unpack.log import Stage, warn

if TYPE_CHECKING:
    from j2c_server.unpack.cache.plans import PlanCache

CHUNK = 1024 * 1024
MANIFEST_LIMIT = 16 * 1024 * 1024
HTTP_TIMEOUT_S = 60
HTTP_ATTEMPTS = 4
_MANIFEST_PATH = re.compile(r"^(?P<root>.*)/manifests/sha256/(?P<hex>[0-9a-f]{64})\.json$")
_JOB_FILE_PATH = re.compile(r"^(?P<root>.*)/jobs/[^/]+/[^/]+\.json$")
_HTTP_GONE = {401, 403, 404, 410}  # no retry helps: missing, or a presigned URL that expired
T = TypeVar("T")


def shown(uri: str) -> str:
    """``uri`` as it may appear in a log: without its query (a presigned URL's signature)."""
    parts = urlsplit(uri)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))


# --------------------------------------------------------------------------- the manifest


def read_manifest(
    uri: str, plans: PlanCache | None = None, pinned: str | None = None
) -> ManifestPlan:
    """The manifest at ``uri``, refused unless its bytes hash to ``pinned`` (the job's
    ``--manifest-digest``: whatever the path, a manifest replaced after submission never runs).
    Unpinned, a content-addressed name (``.../manifests/sha256/<hex>.json``) is checked against
    its bytes, and any other path is used with a ``not pinned`` warning (a hand-run job).
    Validated by :class:`~j2c_server.wire.manifest.Manifest`, unless ``plans`` holds what the same
    validator accepted for the same bytes on this node before (no pydantic import then)."""
    stage = Stage("manifest")
    data = _read_small(uri)
    sha256 = hashlib.sha256(data).hexdigest()
    _check_digest(uri, sha256, pinned)
    raw = _parsed(uri, data)
    # A presigned manifest's urls change every job: its plan is kept without them.
    presigned = without_urls(raw) if plans is not None else None
    key, kept_raw = (presigned[0], presigned[1]) if presigned else (sha256, raw)
    plan = plans.get(key, kept_raw) if plans is not None else None
    how = "validated before on this node"
    if plan is not None and presigned:
        plan = presigned[2].restored(plan)
    if plan is None:
        dumped = _validated(uri, raw)
        plan = ManifestPlan.from_dict(dumped)
        how = "validated"
        if plans is not None:
            plans.put(key, kept_raw, dump_without_urls(dumped) if presigned else dumped)
    layers = count(len(plan.layers), "layer")
    stage.done(f"{shown(uri)}: {layers}, entry {plan.entry.describe()} ({how})")
    return plan


def _check_digest(uri: str, sha256: str, pinned: str | None) -> None:
    """Refuse bytes that are not the pinned (or, unpinned, the content-addressed) manifest."""
    if pinned is not None and sha256 != pinned.removeprefix("sha256:"):
        raise ManifestInvalid(
            f"the manifest at {shown(uri)} is sha256:{sha256}, not the {pinned} this job was "
            "given (--manifest-digest): it was changed after the job was submitted; nothing run",
            field="manifest",
            hint="someone else who can write the store may have replaced it; submit the job "
            "again, and restrict who can write the store's jobs/ and manifests/",
        )
    match = _MANIFEST_PATH.match(urlsplit(uri).path)
    if match and sha256 != match["hex"]:
        raise LayerCorrupt(
            f"the manifest at {shown(uri)} does not match its digest sha256:{match['hex']}",
            field="manifest",
            hint="the stored manifest is corrupt or was replaced; submit the job again",
        )
    if pinned is None and match is None:
        warn(
            "manifest",
            f"not pinned: {shown(uri)} is not content-addressed and no --manifest-digest was "
            f"given; running the bytes found (sha256:{sha256}) unchecked",
        )


def _parsed(uri: str, data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError as exc:
        raise ManifestInvalid(
            f"the manifest at {shown(uri)} is not JSON: {exc}", field="manifest"
        ) from None


def _validated(uri: str, raw: Any) -> dict[str, Any]:
    """The manifest's JSON checked by the pydantic models: every field, defaults filled in."""
    from pydantic import ValidationError

    from j2c_server.core.errors import validation_error_to_j2c
    from j2c_server.wire.manifest import MANIFEST_FORMAT_VERSION, Manifest

    version = raw.get("format_version") if isinstance(raw, dict) else None
    if isinstance(version, int) and version > MANIFEST_FORMAT_VERSION:
        raise ManifestInvalid(
            f"the manifest has format version {version}; this j2c-unpack reads up to "
            f"{MANIFEST_FORMAT_VERSION}",
            field="format_version",
            hint="install a newer j2c in the job's image",
        )
    try:
        manifest = Manifest.model_validate(raw)
    except ValidationError as exc:
        context = f"the manifest at {shown(uri)} is not valid"
        raise validation_error_to_j2c(
            exc, error=ManifestInvalid, context=context, default_field="manifest"
        ) from None
    return manifest.model_dump(mode="json")


def _read_small(uri: str) -> bytes:
    scheme = urlsplit(uri).scheme
    if scheme == "s3":
        # The manifest is small: fetch it like a layer, through a temporary file.
        import tempfile

        with tempfile.TemporaryDirectory(prefix="j2c-manifest-") as tmp:
            dest = Path(tmp) / "manifest.json"
            _download_s3(uri, dest)
            return dest.read_bytes()

    def attempt() -> bytes:
        chunks: list[bytes] = []
        with _open(uri, what="manifest") as source:
            while sum(map(len, chunks)) <= MANIFEST_LIMIT and (chunk := _read(source, uri)):
                chunks.append(chunk)
        return b"".join(chunks)

    data = _with_retries(attempt, uri)
    if len(data) > MANIFEST_LIMIT:
        raise ManifestInvalid(
            f"{shown(uri)} is larger than {byte_size(MANIFEST_LIMIT)}: not a manifest",
            field="manifest",
        )
    return data


# --------------------------------------------------------------------------- the layers


def layer_uri(manifest_uri: str, layer: LayerPlan) -> str:
    """Where ``layer`` is fetched from: its own ``url``, else beside the manifest in its store."""
    if layer.url:
        return layer.url
    return blob_uri(manifest_uri, layer.digest, ".tar.zst", what=f"layer {layer.digest}")


def blob_uri(manifest_uri: str, digest: str, suffix: str, *, what: str) -> str:
    """The blob ``digest`` (a layer's ``.tar.zst``, a big file's ``.file``) beside the manifest
    in its store (storage/base.py's layout)."""
    parts = urlsplit(manifest_uri)
    match = _MANIFEST_PATH.match(parts.path) or _JOB_FILE_PATH.match(parts.path)
    if match is None:
        field = "files.url" if suffix == ".file" else "layers.url"
        raise ManifestInvalid(
            f"{what} has no url, and {shown(manifest_uri)} is not in a j2c store "
            "(.../manifests/sha256/<hex>.json), so there is no store to find it in",
            field=field,
        )
    hexdigest = digest.removeprefix("sha256:")
    path = f"{match['root']}/blobs/sha256/{hexdigest}{suffix}"
    # The query of a presigned manifest URL signs that one object only: it is not reused.
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


class Stopped(Exception):
    """Another download failed: this one stopped early on purpose."""


def download(
    uri: str, dest: Path, stop: threading.Event, limit: int | None = None
) -> tuple[str, int]:
    """Write the object at ``uri`` to ``dest``; return its sha256 (hex) and size.

    With ``limit`` (the size the manifest pins) an HTTP(S) or file object is read no further than
    the first chunk past it: a replaced object, whoever could write the store, is then refused by
    its size without being read whole (the size returned is then over ``limit``, the digest that
    of what was read). An ``s3://`` object comes whole (the store's client)."""
    if urlsplit(uri).scheme == "s3":
        _download_s3(uri, dest)
        return file_sha256(dest), dest.stat().st_size

    def attempt() -> tuple[str, int]:
        digest = hashlib.sha256()
        size = 0
        with _open(uri, what="layer") as source, open(dest, "wb") as out:
            while chunk := _read(source, uri):
                if stop.is_set():
                    raise Stopped()
                digest.update(chunk)
                out.write(chunk)
                size += len(chunk)
                if limit is not None and size > limit:
                    break
        return digest.hexdigest(), size

    return _with_retries(attempt, uri)


def _download_s3(uri: str, dest: Path) -> None:
    import asyncio

    from j2c_server.core.errors import InvalidInput, NotFound
    from j2c_server.storage import ObjectNotFound, download_uri

    try:
        asyncio.run(download_uri(uri, dest))
    except (ObjectNotFound, NotFound) as exc:
        raise LayerMissing(f"{shown(uri)} is not in the store: {exc.message}") from None
    except InvalidInput as exc:
        raise ManifestInvalid(f"cannot fetch {shown(uri)}: {exc.message}", hint=exc.hint) from None
    except J2CError as exc:
        raise StoreUnavailable(f"downloading {shown(uri)}: {exc.message}", hint=exc.hint) from None


def _open(uri: str, *, what: str) -> BinaryIO:
    """A readable stream of the object at a ``file://`` or ``http(s)://`` URI."""
    parts = urlsplit(uri)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ManifestInvalid(f"{uri!r} is not a local file URL", field=what)
        try:
            return open(unquote(parts.path), "rb")
        except FileNotFoundError:
            raise LayerMissing(f"the {what} {uri} does not exist", field=what) from None
        except OSError as exc:
            raise LayerMissing(f"the {what} {uri} cannot be read: {exc.strerror}") from None
    if parts.scheme not in ("http", "https"):
        raise ManifestInvalid(
            f"cannot fetch the {what} from {shown(uri)!r}",
            field=what,
            hint="use file://, s3:// or https:// (a presigned URL)",
        )
    import urllib.error  # http(s) only: their import is a warm start's cost otherwise
    import urllib.request

    request = urllib.request.Request(uri, headers={"Accept-Encoding": "identity"})  # noqa: S310
    try:
        response: BinaryIO = urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S)  # noqa: S310
    except urllib.error.HTTPError as exc:
        if exc.code in _HTTP_GONE:
            raise LayerMissing(
                f"the {what} at {shown(uri)} is not available (HTTP {exc.code})",
                field=what,
                hint="a presigned URL may have expired; submit the job again"
                if exc.code in (401, 403)
                else None,
            ) from None
        raise StoreUnavailable(f"GET {shown(uri)}: HTTP {exc.code} {exc.reason}") from None
    except OSError as exc:  # URLError, refused connections and timeouts are OSErrors
        raise StoreUnavailable(f"GET {shown(uri)}: {getattr(exc, 'reason', exc)}") from None
    return response


def _read(source: BinaryIO, uri: str) -> bytes:
    try:
        return source.read(CHUNK)
    except OSError as exc:
        raise StoreUnavailable(f"reading {shown(uri)}: {exc}") from None
    except Exception as exc:
        import http.client  # loaded already when the source is an HTTP response

        if isinstance(exc, http.client.HTTPException):
            raise StoreUnavailable(f"reading {shown(uri)}: {exc}") from None
        raise


def _with_retries(op: Callable[[], T], uri: str) -> T:
    """``op()``, retried with backoff while an HTTP store is unavailable (it may be restarting)."""

    def on_retry(exc: BaseException, _attempt: int, delay: float) -> None:
        warn("downloading", f"{getattr(exc, 'message', exc)}; retrying in {delay:.0f} s")

    attempts = HTTP_ATTEMPTS if urlsplit(uri).scheme in ("http", "https") else 1
    return retry_sync(
        op, Backoff(lambda exc: isinstance(exc, StoreUnavailable), on_retry, attempts=attempts)
    )


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as source:
        while chunk := source.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def short_digest(digest: str) -> str:
    return digest.removeprefix("sha256:")[:12]
