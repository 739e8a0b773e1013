"""``make test`` warms numba's cache before the test processes start (testkit/warm_kernels.py):
every rule's compiled learner must be among what it loads or compiles, into the disk cache the
test processes read."""

from __future__ import annotations

from online_ctr.learning import kernels
from online_ctr.learning.rules import RULES
from testkit.warm_kernels import warm


def test_warming_compiles_every_rules_learner_into_the_disk_cache() -> None:
    assert warm() == [*sorted(RULES), "hashing", "columnar", "scan"]
    for name in RULES:
        learner = kernels.learner(RULES[name])
        assert len(learner.signatures) == 1, name  # type: ignore[attr-defined]
        # A disk cache, not numba's no-op one (which it falls back to with no writable place).
        assert type(learner._cache).__name__ == "FunctionCache", name  # type: ignore[attr-defined]
