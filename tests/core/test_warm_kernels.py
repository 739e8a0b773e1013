"""``make test`` warms numba's cache before the test processes start (testkit/warm_kernels.py):
every rule's compiled learner must be among what it loads or compiles, into the disk cache the
test processes read, and its parts together must warm everything once."""

from __future__ import annotations

import argparse

import pytest

from online_ctr.learning import kernels
from online_ctr.learning.rules import RULES
from testkit.warm_kernels import part_of, warm

EVERYTHING = {*RULES, "hashing", "columnar", "scan"}


def test_warming_compiles_every_rules_learner_into_the_disk_cache() -> None:
    assert set(warm()) == EVERYTHING and len(warm()) == len(EVERYTHING)
    for name in RULES:
        learner = kernels.learner(RULES[name]).dispatcher()  # numba's, not a precompiled one
        assert len(learner.signatures) == 1, name
        # A disk cache, not numba's no-op one (which it falls back to with no writable place).
        assert type(learner._cache).__name__ == "FunctionCache", name


def test_the_parts_warm_everything_once_between_them() -> None:
    first, second = warm(1, 2), warm(2, 2)
    assert set(first) | set(second) == EVERYTHING and not set(first) & set(second)
    assert first[0] == "scan"  # the largest leads the first part


@pytest.mark.parametrize("text", ["0/2", "3/2", "2", "a/b", "1/2/3"])
def test_a_part_is_k_of_n(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="K"):
        part_of(text)
    assert part_of("2/3") == (2, 3)
