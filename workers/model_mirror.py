"""What the learner holds of its model between groups, as of the last commit it made or read:
loaded from Redis on taking the lease, moved on by each commit, dropped when it may no longer
be exact (a commit refused, Redis trouble, the lease lost), and what :func:`learn_group` learns
a group from.

Each part is the model's own in Redis once the commit that produced it is in: keeping it in
the learner spares a read per group of what only this learner writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from online_ctr.learning.admission import Tally
from online_ctr.learning.calibration import Histogram
from online_ctr.learning.eviction import Evicting
from online_ctr.store.filter import ExistenceFilter
from online_ctr.store.state import ModelStore

if TYPE_CHECKING:  # learn_group learns from a mirror: imported for the annotation only
    from workers.learn_group import Learning


@dataclass
class ModelMirror:
    """The model as of ``version`` = (step, epoch); None where not loaded (or the model has
    none: a calibration histogram only with calibration power, admission counters and their
    tally only with bloom admission, a feature budget only with max_features)."""

    version: tuple[int, str] = (0, "")
    #: The calibration's histogram.
    histogram: Histogram | None = None
    #: The existence filters, which say which features are surely new.
    known: ExistenceFilter | None = None
    #: The admission counters (a counting Bloom filter) and their tally.
    counters: NDArray[np.uint8] | None = None
    tally: Tally | None = None
    #: The feature budget.
    budget: Evicting | None = None
    #: The base rate's counts, and the recent window's sums of predictions and labels.
    base: NDArray[np.float64] | None = None
    recent_sums: NDArray[np.float64] | None = None

    async def load(self, store: ModelStore) -> None:
        """Read every part from Redis (after the redo log's applies, which set the existence
        bits of every feature they stored)."""
        self.known = await ExistenceFilter.load_or_make(store.redis, store.keys, store.spec.layout)
        self.counters = await store.admission_counters()
        self.version = await store.version()
        if self.counters is not None:
            self.tally = await store.admission_tally(self.counters)
        self.budget = await store.feature_budget()
        self.base = await store.base_counts()
        self.recent_sums = await store.recent_sums()
        if store.spec.calibration == "power":
            self.histogram = await store.calibration_histogram()

    def forget(self) -> None:
        """Drop what may no longer be exact (the version and histogram are read again with
        the rest on the next :meth:`load`)."""
        self.known = None
        self.counters = self.tally = None
        self.budget = None
        self.base = self.recent_sums = None

    def committed(self, t: int, learning: Learning) -> None:
        """The group of ``learning`` committed, the model now at step ``t``: its calibration,
        budget, base rate, sums and admission counters are the model's."""
        self.version = (t, self.version[1])
        self.histogram = learning.histogram
        self.budget = learning.budget
        self.base = learning.base
        self.recent_sums = np.array(learning.change.sums[2:])
        if self.counters is not None:
            counted = learning.change.counters
            if counted.whole is not None:  # halved (bloom:N:D), or many changed
                self.counters[:] = counted.whole
            else:
                self.counters[counted.positions] = counted.values
            self.tally = learning.tally
