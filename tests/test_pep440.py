"""core/pep440.py (what j2c-unpack judges versions with, no ``packaging`` in the job) agrees with
``packaging`` on every pair of a table of versions and specifiers, order included."""

from __future__ import annotations

import itertools

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version as PackagingVersion

from j2c_server.core.pep440 import InvalidVersion, parse, satisfies

VERSIONS = [
    "1.0",
    "1.0.0",
    "1.0a1",
    "1.0b2",
    "1.0rc1",
    "1.0.dev0",
    "1.0a1.dev1",
    "1.0.post1",
    "1.0.post1.dev2",
    "1.0+local",
    "1.0+abc.5",
    "1.0+5",
    "1.1",
    "0.9",
    "2.0",
    "1!0.5",
    "1.24.2",
    "1.25.2",
    "1.26.4",
    "2.4.6",
    "2.7.0",
    "2.7rc1",
    "2026.5.9",
    "1.0.1",
    "1.0-1",
    "1.0_rc1",
    "v1.0",
    "1.0c1",
    "1.0-r2",
    "1.0.dev",
    "1.0a",
    "2.0.0.dev3",
    "0.0.1",
]
SPECIFIERS = [
    "==1.0",
    "!=1.0",
    "<=1.0",
    ">=1.0",
    "<1.0",
    ">1.0",
    "~=1.0",
    "~=1.0.0",
    "==1.*",
    "!=1.*",
    "==1.0.*",
    ">=1.25.2",
    "<2.7,>=1.26.4",
    ">1.0.post1",
    "<1.0rc1",
    ">1.0a1",
    "==1.0+local",
    "===1.0",
    ">=1!0",
    "<2",
    ">0.9,!=1.0.post1",
    "~=2.4",
    "~=1!0.5",
    "==2026.*",
    "<2.0.0",
    ">2.0.dev1",
]


@pytest.mark.parametrize("specifier", SPECIFIERS)
def test_every_version_meets_a_specifier_as_packaging_says(specifier: str) -> None:
    wanted = SpecifierSet(specifier, prereleases=True)
    for version in VERSIONS:
        expected = wanted.contains(PackagingVersion(version), prereleases=True)
        assert satisfies(version, specifier) == expected, (version, specifier)


def test_versions_sort_as_packaging_sorts_them() -> None:
    for a, b in itertools.product(VERSIONS, VERSIONS):
        expected = PackagingVersion(a) < PackagingVersion(b)
        assert (parse(a).key() < parse(b).key()) == expected, (a, b)


def test_an_empty_specifier_holds_and_bad_input_is_an_error() -> None:
    assert satisfies("1.0", "")
    with pytest.raises(InvalidVersion):
        satisfies("not a version", ">=1")
    with pytest.raises(InvalidVersion):
        satisfies("1.0", "=>1")
    with pytest.raises(InvalidVersion):
        satisfies("1.0", ">=1.*")
