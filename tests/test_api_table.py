"""docs/architecture.md's API table is the route table: every method of every route in
``handlers.ROUTES`` is a row with the action it declares, and no row names a route or a method
that is not there (the websocket is its ``GET``)."""

from __future__ import annotations

import re
from pathlib import Path

from j2c_server.server.handler_base import declared_actions
from j2c_server.server.handlers import ROUTES

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
_GROUP = re.compile(r"\(\?P<(\w+)>[^)]*\)")
_PLACEHOLDERS = {"job_id": "{id}", "name": "{name}"}


def _from_code() -> set[tuple[str, str, str | None]]:
    rows = set()
    for route in ROUTES:
        parts = [_GROUP.sub(lambda m: _PLACEHOLDERS[m.group(1)], part) for part in route.path]
        path = "/" + "/".join(parts)
        for method, action in declared_actions(route.handler).items():
            rows.add((method, path, action))
    return rows


def _from_doc() -> set[tuple[str, str, str | None]]:
    table = DOC.read_text().split("\n## API", 1)[1]
    rows = set()
    for line in table.splitlines():
        cells = [cell.strip() for cell in line.split("|")[1:-1]]
        if len(cells) < 2 or not cells[0].startswith(("`", "websocket")):
            continue
        first = cells[0].replace("websocket ", "GET ").replace("`", "")
        method, _, path = first.partition(" ")
        rows.add((method, path.split("?", 1)[0], cells[1]))
    return rows


def test_the_api_table_is_the_route_table() -> None:
    code, doc = _from_code(), _from_doc()
    assert not code - doc, f"routes the table lacks (or with another action): {code - doc}"
    assert not doc - code, f"rows of the table that are no route: {doc - code}"


def test_the_check_reads_rows() -> None:
    assert ("POST", "/jobs", "execute") in _from_doc()
