"""How the CLI reports failures: one message on stderr and an exit code, never a traceback.

Exit codes: 2 for anything the user can fix (bad input, bad configuration, unknown job), 1 for
runtime failures (storage, scheduler). A job's own exit code is the command's exit code only
where the command waited for the job.
"""

from __future__ import annotations

from typing import IO, Any

import click
from pydantic import ValidationError

from j2c_server.core.errors import ConfigError, J2CError, validation_error_to_j2c

USAGE_EXIT = 2
RUNTIME_EXIT = 1


def exit_code_for(error: J2CError) -> int:
    return USAGE_EXIT if error.status_code < 500 or isinstance(error, ConfigError) else RUNTIME_EXIT


def exit_code_for_code(code: object) -> int:
    """The exit code for an error known only by its ``code`` (from a job's error event)."""
    pending: list[type[J2CError]] = [J2CError]
    while pending:
        cls = pending.pop()
        if cls.code == code:
            return exit_code_for(cls(""))
        pending.extend(cls.__subclasses__())
    return RUNTIME_EXIT


class J2CFailure(click.ClickException):
    """A runtime :class:`J2CError` shown as ``j2c: error: <message>`` plus its hint."""

    exit_code = RUNTIME_EXIT

    def __init__(self, error: J2CError) -> None:
        super().__init__(error.message)
        self.hint = error.hint

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"j2c: error: {self.message}", err=True)
        if self.hint:
            click.echo(f"j2c: hint: {self.hint}", err=True)


class J2CUsageFailure(J2CFailure):
    """Something the user can fix: bad input, bad configuration, an unknown job."""

    exit_code = USAGE_EXIT


def as_failure(error: J2CError | ValidationError) -> J2CFailure:
    if isinstance(error, ValidationError):
        error = validation_error_to_j2c(error, default_field=error.title)
    if exit_code_for(error) == USAGE_EXIT:
        return J2CUsageFailure(error)
    return J2CFailure(error)


class J2CGroup(click.Group):
    """The ``j2c`` group: every subcommand's J2CError ends as a short message and exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (J2CError, ValidationError) as error:
            raise as_failure(error) from None
