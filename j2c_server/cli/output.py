"""Where the CLI writes: machine-readable JSON on stdout, j2c's own messages on stderr."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click
from pydantic import BaseModel


def to_jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [to_jsonable(item) for item in value]
    return value


def json_text(value: Any) -> str:
    """``value`` (a model, or a list of them) as indented JSON: how every command prints one."""
    return json.dumps(to_jsonable(value), indent=2)


def print_json(value: Any) -> None:
    click.echo(json_text(value))


def print_json_line(value: BaseModel) -> None:
    click.echo(value.model_dump_json())


def say(line: str) -> None:
    click.echo(line, err=True)
