"""make test hands the longest files out first (tests/conftest.py's ``LONGEST_FIRST``)."""

from __future__ import annotations

from testkit.paths import ROOT
from tests.conftest import LONGEST_FIRST


def test_the_longest_files_exist() -> None:
    # A file renamed or moved would silently go back to its place in the order.
    assert [path for path in LONGEST_FIRST if not (ROOT / path).is_file()] == []
