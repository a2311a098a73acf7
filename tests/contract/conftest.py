"""The ``driver`` fixture: every contract test runs once per backend of
:data:`tests.contract.drivers.BACKENDS` (select one with ``-k <name>``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.contract.drivers import BACKENDS, MARKS, Driver


@pytest.fixture(
    params=[pytest.param(name, marks=MARKS.get(name, []), id=name) for name in BACKENDS]
)
def driver(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Driver]:
    yield from BACKENDS[request.param](request, tmp_path)
