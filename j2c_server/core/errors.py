"""The j2c error hierarchy: one place that says what went wrong and how a front end shows it.

Every error a user can cause carries an HTTP status (4xx for bad input), a machine-readable
``code`` and, where one input is at fault, the ``field`` it came from. Handlers, the CLI and the
magic map these once, centrally; no front end re-invents the mapping.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import ValidationError


class J2CError(Exception):
    """Base for every error j2c raises on purpose."""

    status_code: int = 500
    code: str = "internal"

    def __init__(self, message: str, *, field: str | None = None, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.hint = hint

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"error": self.code, "message": self.message}
        if self.field is not None:
            body["field"] = self.field
        if self.hint is not None:
            body["hint"] = self.hint
        return body

    def __str__(self) -> str:
        parts = [self.message]
        if self.hint:
            parts.append(f"({self.hint})")
        return " ".join(parts)


class InvalidInput(J2CError):
    """The request is malformed or names something that cannot work (a bad field)."""

    status_code = 400
    code = "invalid_input"


class Forbidden(J2CError):
    """The request reaches outside what this user may touch (e.g. a path outside the root)."""

    status_code = 403
    code = "forbidden"


class NotFound(J2CError):
    status_code = 404
    code = "not_found"


class Conflict(J2CError):
    status_code = 409
    code = "conflict"


class ConfigError(J2CError):
    """The operator's configuration is wrong; the message names the key."""

    status_code = 500
    code = "config"


class PackError(InvalidInput):
    """The project or venv cannot be packed as asked."""

    code = "pack"


class StorageError(J2CError):
    """The object store refused or failed; ``hint`` says what to check."""

    status_code = 502
    code = "storage"


class IntegrityError(StorageError):
    """A blob's content does not match its digest."""

    code = "integrity"


class SchedulerError(J2CError):
    """The scheduler refused or failed; ``hint`` says what to check."""

    status_code = 502
    code = "scheduler"


class SchedulerUnavailable(SchedulerError):
    """The scheduler cannot be reached right now; callers retry with backoff."""

    status_code = 503
    code = "scheduler_unavailable"


class DiskFull(J2CError):
    """The data dir's disk (or the user's quota) is full: nothing could be recorded. Nothing the
    server answered before is lost; the same request works once there is space."""

    status_code = 507
    code = "disk_full"


_SQLITE_FULL = 13  # sqlite3.SQLITE_FULL: "database or disk is full"


def disk_full_to_j2c(exc: BaseException | None, data_dir: str) -> DiskFull | None:
    """A full disk as met by a write (``OSError`` ENOSPC or EDQUOT, SQLite's SQLITE_FULL) as one
    :class:`DiskFull` naming the data dir; a :class:`DiskFull` as it is (a pack worker's, naming
    its folder); None for any other error."""
    import errno

    if isinstance(exc, DiskFull):
        return exc
    full = (isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)) or (
        getattr(exc, "sqlite_errorcode", None) == _SQLITE_FULL
    )
    if not full:
        return None
    return DiskFull(
        f"the disk of j2c's data dir ({data_dir}) is full: {exc}",
        hint="free some space there, then send again (nothing recorded before is lost)",
    )


def validation_error_to_j2c(
    exc: ValidationError,
    *,
    error: type[J2CError] = InvalidInput,
    context: str = "",
    default_field: str | None = None,
) -> J2CError:
    """A pydantic ``ValidationError`` as one j2c error naming the first field at fault:
    ``"[context: ]field: what is wrong"``, the field as a dotted path (``resources.gpus``), or
    ``default_field`` where the fault is the whole value."""
    first = exc.errors()[0]
    # pydantic marks a mapping's key as a "[key]" step and prefixes a validator's own words
    # with "Value error, ": neither helps the person reading the message.
    path = [str(part) for part in first["loc"] if part != "[key]"]
    field = ".".join(path) or default_field
    what = str(first["msg"]).removeprefix("Value error, ")
    message = f"{field}: {what}" if field else what
    return error(f"{context}: {message}" if context else message, field=field)
