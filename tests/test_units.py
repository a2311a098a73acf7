"""One way to write sizes and counts in messages (CLI, pipeline, j2c-unpack)."""

from __future__ import annotations

import pytest

from j2c_server.cli.render import amount
from j2c_server.core.units import byte_size, count


@pytest.mark.parametrize(
    ("nbytes", "text"),
    [
        (0, "0 B"),
        (999, "999 B"),
        (1000, "1.0 kB"),
        (5_400, "5.4 kB"),
        (2_100_000, "2.1 MB"),
        (3 * 10**9, "3.0 GB"),
        (4.5 * 10**12, "4.5 TB"),
    ],
)
def test_sizes_are_in_decimal_units(nbytes: float, text: str) -> None:
    assert byte_size(nbytes) == text
    assert amount(nbytes, "bytes") == text  # the CLI's progress bars say the same


def test_counts_agree_with_their_noun() -> None:
    assert [count(n, "file") for n in (0, 1, 2)] == ["0 files", "1 file", "2 files"]
